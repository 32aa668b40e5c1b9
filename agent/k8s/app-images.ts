// Which app images cannot run the copy of lastcall that classic mode puts beside them (known by
// name: built without glibc or libstdc++).

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
