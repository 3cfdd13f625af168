// Checks of arguments before any request, worded as the server words its own, so a
// bad argument reads the same whether the client or the server refused it. The
// limits are fence's (validate.go at the repository root).

import { InvalidError } from "./errors.js";

/** The longest lock name or key, in UTF-8 bytes. */
export const MAX_NAME_BYTES = 255;
/** The longest lease, in ms (24h). */
export const MAX_TTL_MS = 86_400_000;
/** The largest token: 2^53-1, which JSON numbers carry exactly. */
export const MAX_TOKEN = Number.MAX_SAFE_INTEGER;
/** The longest owner of a lease, in UTF-8 bytes. */
export const MAX_OWNER_BYTES = 256;
/** The most permits of a semaphore, and the most shared holders of a lock at once. */
export const MAX_LIMIT = 1024;
const MAX_LEASE_ID_LEN = 128;
const utf8 = new TextEncoder();

/** quote renders a value as Go's %q does for the cases that matter here. */
export function quote(s: string): string {
  return JSON.stringify(s);
}

/** opName is `op "name"`, or `op` alone without a name. */
export function opName(op: string, name: string): string {
  return name === "" ? op : `${op} ${quote(name)}`;
}

/** invalid returns the InvalidError of field (with its value, unless secret) for op on name. */
export function invalid(op: string, name: string, field: string, value: string | undefined, reason: string): InvalidError {
  let fact = `invalid ${field}: ${reason}`;
  if (value !== undefined && value !== "") {
    const v = value.length > 64 ? value.slice(0, 64) + "..." : value;
    fact = `invalid ${field} ${quote(v)}: ${reason}`;
  }
  return new InvalidError(undefined, `${opName(op, name)}: ${fact}`, field, reason);
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/**
 * checkName throws the InvalidError of a bad lock name or key (field "name" or
 * "key"): not a string, empty, over 255 bytes, not valid UTF-8, or with a control
 * character. The error names op only, since the name itself is what is wrong.
 */
export function checkName(op: string, field: "name" | "key", v: unknown): string {
  if (typeof v !== "string") {
    throw invalid(op, "", field, undefined, `must be a string, not ${typeName(v)}`);
  }
  if (v === "") throw invalid(op, "", field, v, "is empty");
  if (LONE_SURROGATE.test(v)) throw invalid(op, "", field, undefined, "is not valid UTF-8");
  const n = utf8.encode(v).length;
  if (n > MAX_NAME_BYTES) throw invalid(op, "", field, v, `is ${n} bytes, longer than ${MAX_NAME_BYTES}`);
  const m = CONTROL.exec(v);
  if (m) {
    const cp = m[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0");
    throw invalid(op, "", field, v, `contains control character U+${cp}`);
  }
  return v;
}

/**
 * checkOwner throws the InvalidError of a bad owner (field "owner"): not a string, over
 * 256 bytes, or not valid UTF-8. "" is no owner. Which characters are printable is the
 * server's to say (it answers 400 naming the field "owner").
 */
export function checkOwner(op: string, name: string, v: unknown): string {
  if (typeof v !== "string") throw invalid(op, name, "owner", undefined, `must be a string, not ${typeName(v)}`);
  if (LONE_SURROGATE.test(v)) throw invalid(op, name, "owner", undefined, "is not valid UTF-8");
  const n = utf8.encode(v).length;
  if (n > MAX_OWNER_BYTES) throw invalid(op, name, "owner", v, `is ${n} bytes, longer than ${MAX_OWNER_BYTES}`);
  return v;
}

/**
 * checkRequestId throws the InvalidError of a bad request id (field "requestId"): not
 * 1 to 128 bytes of printable ASCII without spaces.
 */
export function checkRequestId(op: string, name: string, v: unknown): string {
  if (typeof v !== "string") throw invalid(op, name, "requestId", undefined, `must be a string, not ${typeName(v)}`);
  if (v === "") throw invalid(op, name, "requestId", v, "is empty");
  if (v.length > 128) throw invalid(op, name, "requestId", v, `is ${v.length} bytes, longer than 128`);
  if (!/^[!-~]+$/.test(v)) throw invalid(op, name, "requestId", v, "must be printable ASCII without spaces");
  return v;
}

/** checkTTL throws the InvalidError of a ttlMs that is not an integer in [1, 86400000]. */
export function checkTTL(op: string, name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > MAX_TTL_MS) {
    throw invalid(op, name, "ttlMs", String(v), `must be an integer between 1 and ${MAX_TTL_MS}`);
  }
  return v;
}

/** checkLimit throws the InvalidError of a limit that is not an integer in [1, 1024]. */
export function checkLimit(op: string, name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > MAX_LIMIT) {
    throw invalid(op, name, "limit", String(v), `must be an integer between 1 and ${MAX_LIMIT}`);
  }
  return v;
}

/** checkWait throws the InvalidError of a waitMs that is not a number >= 0 (Infinity: wait until acquired). */
export function checkWait(op: string, name: string, v: unknown): number {
  if (typeof v !== "number" || Number.isNaN(v) || v < 0) {
    throw invalid(op, name, "waitMs", String(v), "must be a number of ms, at least 0 (Infinity: until acquired)");
  }
  return v;
}

/**
 * checkQueryWait throws the InvalidError of the waitMs of a blocking query (watch,
 * observeLeader) that is not a finite number above 0; it returns it in whole ms,
 * rounded up. 0 is refused: a watch asking the server not to wait would poll it in a
 * busy loop.
 */
export function checkQueryWait(op: string, name: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isFinite(v) || !(v > 0)) {
    throw invalid(op, name, "waitMs", String(v), "must be a number of ms above 0");
  }
  return Math.ceil(v);
}

/** checkToken throws the InvalidError of a token that is not an integer in [1, 2^53-1]. */
export function checkToken(op: string, name: string, field: string, v: unknown): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) {
    throw invalid(op, name, field, String(v), `must be an integer between 1 and ${MAX_TOKEN}`);
  }
  return v;
}

/** checkLeaseId throws the InvalidError of a lease id that is not 1 to 128 printable ASCII characters; it never echoes the id. */
export function checkLeaseId(op: string, name: string, v: unknown): string {
  if (typeof v !== "string") throw invalid(op, name, "lease", undefined, `must be a string, not ${typeName(v)}`);
  if (v === "") throw invalid(op, name, "lease", undefined, "is empty");
  if (v.length > MAX_LEASE_ID_LEN) throw invalid(op, name, "lease", undefined, `is ${v.length} bytes, longer than ${MAX_LEASE_ID_LEN}`);
  if (!/^[\x21-\x7e]+$/.test(v)) throw invalid(op, name, "lease", undefined, "must be printable ASCII without spaces");
  return v;
}

function typeName(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "an array" : typeof v;
}

/**
 * escapeSegment escapes s as one URL path segment that the server decodes back to s
 * exactly: '/' as %2F, and '.' as %2E so that "." and ".." are not dot segments.
 */
export function escapeSegment(s: string): string {
  return encodeURIComponent(s).replaceAll(".", "%2E");
}
