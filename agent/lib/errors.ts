/** Exit codes of `lastcall run`. */
export const EXIT = { ok: 0, envoyGaveUp: 1, badConfig: 2 } as const;

/** A refusal at start: printed as one line (plus Envoy's own lines), exit 2. */
export class StartError extends Error {
  override name = "StartError";
  constructor(message: string, readonly details: string[] = []) {
    super(message);
  }
}
