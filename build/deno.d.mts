export const DENO_PACKAGE: string;
export function resolveDeno(): string;
