// What the `lastcall inject` tests of hand-built manifests share: the sidecar options of each
// mode, and inject itself with native mode by default.
import { injectManifest, type InjectOptions } from "../../agent/k8s/inject.ts";
import { SIDECAR_DEFAULTS } from "../../agent/k8s/sidecar.ts";

/** Native mode (inject's default): lastcall as an init container with restartPolicy Always. */
export const native: InjectOptions = SIDECAR_DEFAULTS;
/** Classic mode: lastcall as a regular container. */
export const classic: InjectOptions = { ...SIDECAR_DEFAULTS, mode: "classic" };
/** Injects a manifest's text, in native mode unless told otherwise. */
export const inject = (text: string, options: InjectOptions = native) =>
  injectManifest(text, options);
