// Which app images cannot run the copy of lastcall that classic mode puts beside them. The
// copy is lastcall's single executable: Node with the agent inside, linked against glibc and
// libstdc++ (`ldd dist/lastcall`). Inject cannot look inside an image (it reads a manifest,
// offline), so it knows images by name: the families below are built without those libraries.
// An image not named here is assumed to have them; `lastcall exec` then fails at the app's
// start with "not found" if it does not, which the pod's events show.

/** Image families known to have no glibc or no libstdc++: [pattern, what it is]. */
const WITHOUT_LIBC: readonly (readonly [RegExp, string])[] = [
  [/(^|\/)distroless\/static([-:@]|$)/, "distroless static: no libc"],
  [/(^|\/)distroless\/base(-nossl)?([-:@]|$)/, "distroless base: glibc without libstdc++"],
  [/(^|\/)envoyproxy\/envoy-distroless([:@]|$)/, "Envoy's distroless image: no libstdc++"],
  [/(^|\/)envoyproxy\/envoy:distroless/, "Envoy's distroless image: no libstdc++"],
  [/(^|\/)projectcontour\/contour([:@]|$)/, "Contour's image: a static binary on scratch"],
  [/(^|\/)envoyproxy\/gateway([:@]|$)/, "Envoy Gateway's image: distroless static"],
  [/(^|\/)(alpine|busybox)([:@]|$)/, "musl, not glibc"],
  [/(^|\/)scratch([:@]|$)/, "scratch: empty"],
  [/(^|\/)chainguard\/static([:@]|$)/, "Chainguard static: no libc"],
];

/**
 * Why lastcall's single executable cannot run in `image`, or undefined when nothing says so.
 *
 * @example
 * ```ts
 * withoutLibc("gcr.io/distroless/static-debian12:nonroot"); // "distroless static: no libc"
 * withoutLibc("node:20-bookworm-slim"); // undefined
 * ```
 */
export function withoutLibc(image: unknown): string | undefined {
  if (typeof image !== "string") return undefined;
  return WITHOUT_LIBC.find(([pattern]) => pattern.test(image))?.[1];
}
