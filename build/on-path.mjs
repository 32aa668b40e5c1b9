// Finding the executables the build scripts run, where Debian and Go install them.
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

/**
 * An executable by name on PATH, else in /usr/sbin, /sbin (Debian's podman, runc, iptables
 * when root's PATH lacks them) or /usr/local/go/bin (Go's own install); undefined if none.
 *
 * @example
 * onPath("runc") ?? "/usr/sbin/runc";
 * @param {string} name
 * @returns {string | undefined}
 */
export function onPath(name) {
  for (
    const dir of [
      ...(process.env.PATH ?? "").split(delimiter),
      "/usr/sbin",
      "/sbin",
      "/usr/local/go/bin",
    ]
  ) {
    if (!dir) continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}
