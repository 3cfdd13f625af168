import { InvalidError } from "./errors.js";
/** The longest lock name or key, in UTF-8 bytes. */
export declare const MAX_NAME_BYTES = 255;
/** The longest lease, in ms (24h). */
export declare const MAX_TTL_MS = 86400000;
/** The largest token: 2^53-1, which JSON numbers carry exactly. */
export declare const MAX_TOKEN: number;
/** The longest owner of a lease, in UTF-8 bytes. */
export declare const MAX_OWNER_BYTES = 256;
/** The most permits of a semaphore, and the most shared holders of a lock at once. */
export declare const MAX_LIMIT = 1024;
/** quote renders a value as Go's %q does for the cases that matter here. */
export declare function quote(s: string): string;
/** opName is `op "name"`, or `op` alone without a name. */
export declare function opName(op: string, name: string): string;
/** invalid returns the InvalidError of field (with its value, unless secret) for op on name. */
export declare function invalid(op: string, name: string, field: string, value: string | undefined, reason: string): InvalidError;
/**
 * checkName throws the InvalidError of a bad lock name or key (field "name" or
 * "key"): not a string, empty, over 255 bytes, not valid UTF-8, or with a control
 * character. The error names op only, since the name itself is what is wrong.
 */
export declare function checkName(op: string, field: "name" | "key", v: unknown): string;
/**
 * checkOwner throws the InvalidError of a bad owner (field "owner"): not a string, over
 * 256 bytes, or not valid UTF-8. "" is no owner. Which characters are printable is the
 * server's to say (it answers 400 naming the field "owner").
 */
export declare function checkOwner(op: string, name: string, v: unknown): string;
/**
 * checkRequestId throws the InvalidError of a bad request id (field "requestId"): not
 * 1 to 128 bytes of printable ASCII without spaces.
 */
export declare function checkRequestId(op: string, name: string, v: unknown): string;
/** checkTTL throws the InvalidError of a ttlMs that is not an integer in [1, 86400000]. */
export declare function checkTTL(op: string, name: string, v: unknown): number;
/** checkLimit throws the InvalidError of a limit that is not an integer in [1, 1024]. */
export declare function checkLimit(op: string, name: string, v: unknown): number;
/** checkWait throws the InvalidError of a waitMs that is not a number >= 0 (Infinity: wait until acquired). */
export declare function checkWait(op: string, name: string, v: unknown): number;
/**
 * checkQueryWait throws the InvalidError of the waitMs of a blocking query (watch,
 * observeLeader) that is not a finite number above 0; it returns it in whole ms,
 * rounded up. 0 is refused: a watch asking the server not to wait would poll it in a
 * busy loop.
 */
export declare function checkQueryWait(op: string, name: string, v: unknown): number;
/** checkToken throws the InvalidError of a token that is not an integer in [1, 2^53-1]. */
export declare function checkToken(op: string, name: string, field: string, v: unknown): number;
/** checkLeaseId throws the InvalidError of a lease id that is not 1 to 128 printable ASCII characters; it never echoes the id. */
export declare function checkLeaseId(op: string, name: string, v: unknown): string;
/**
 * escapeSegment escapes s as one URL path segment that the server decodes back to s
 * exactly: '/' as %2F, and '.' as %2E so that "." and ".." are not dot segments.
 */
export declare function escapeSegment(s: string): string;
