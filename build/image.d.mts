export const IMAGE: string;
export const BASE: string;
export const INSTALL_COMMAND: string;
export function podmanSetup(): { args: string[]; env: NodeJS.ProcessEnv };
export function missingTools(): string[];
export function podman(args: string[]): Promise<string>;
export function buildImages(
  options?: { log?: (line: string) => void },
): Promise<{ lastcall: string; node: string; envoy: string; debian: string; built: string[] }>;
