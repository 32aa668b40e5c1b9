export const ENVOY_WHEEL: string;
export function resolveEnvoy(): string;
export function envoyVersion(binary: string): string;
