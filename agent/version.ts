/** lastcall's version, kept in step with package.json by the release process. */
export const VERSION = "0.1.0";
