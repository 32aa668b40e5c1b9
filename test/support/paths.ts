// Where the repository is, for tests that read its files or run its scripts.
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root folder (absolute, no trailing slash). */
export const root = resolve(fileURLToPath(new URL("../..", import.meta.url)));
