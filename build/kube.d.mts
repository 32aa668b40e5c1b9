export const KUBE_VERSION: string;
export const K8S_BINARIES: string[];
export const KT_IMAGE: string;
export const KUBE_PACKAGES: string;
export function kubePaths(): { cache: string; bin: Record<string, string>; ktImage: string };
export function missingArtifacts(names?: string[]): string[];
export function onPath(name: string): string | undefined;
export function buildKube(
  options?: { names?: string[]; log?: (line: string) => void },
): Promise<{ built: string[]; paths: ReturnType<typeof kubePaths> }>;
