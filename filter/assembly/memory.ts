// Memory the host writes into: `malloc` blocks and the scratch slots of out-parameters.

/** Allocates `size` bytes for the host; the module frees them with `freeHostBlock`. */
export function malloc(size: usize): usize {
  return __alloc(size, 0);
}

/** Returns a block the host allocated with `malloc` (0 is ignored). */
export function freeHostBlock(ptr: usize): void {
  if (ptr != 0) __free(ptr);
}

// Out-parameters of host calls: pointer, size, CAS/token/id. One VM runs one callback at a time.
const scratch = __alloc(16, 0);
/** Address the host writes a returned pointer to. */
export const OUT_PTR: usize = scratch;
/** Address the host writes a returned size to. */
export const OUT_SIZE: usize = scratch + 4;
/** Address the host writes a CAS token, call token or metric id to. */
export const OUT_U32: usize = scratch + 8;

/** A byte string filled from a host call: copies it into a managed buffer and frees the host block. */
export function takeHostBytes(): ArrayBuffer {
  const ptr = load<u32>(OUT_PTR) as usize;
  const size = load<u32>(OUT_SIZE) as i32;
  const copy = new ArrayBuffer(size);
  if (ptr != 0 && size > 0) memory.copy(changetype<usize>(copy), ptr, size);
  freeHostBlock(ptr);
  return copy;
}

/** UTF-8 bytes of a string, for host calls. */
export function utf8(text: string): ArrayBuffer {
  return String.UTF8.encode(text);
}

/** Growable byte string: builds report bodies and log lines without decoding any input. */
export class Bytes {
  private data: ArrayBuffer = new ArrayBuffer(64);
  length: i32 = 0;

  private reserve(extra: i32): void {
    if (this.length + extra <= this.data.byteLength) return;
    let capacity = this.data.byteLength * 2;
    while (capacity < this.length + extra) capacity *= 2;
    const grown = new ArrayBuffer(capacity);
    memory.copy(changetype<usize>(grown), changetype<usize>(this.data), this.length);
    this.data = grown;
  }

  /** Appends `size` bytes from `ptr`. */
  raw(ptr: usize, size: i32): Bytes {
    this.reserve(size);
    memory.copy(changetype<usize>(this.data) + this.length, ptr, size);
    this.length += size;
    return this;
  }

  /** Appends a byte buffer. */
  buf(bytes: ArrayBuffer): Bytes {
    return this.raw(changetype<usize>(bytes), bytes.byteLength);
  }

  /** Appends a string as UTF-8. */
  str(text: string): Bytes {
    return this.buf(String.UTF8.encode(text));
  }

  /** Appends an unsigned integer in decimal. */
  num(value: u64): Bytes {
    return this.str(value.toString());
  }

  /** Appends at most `max` bytes, control bytes shown as `?`, an ellipsis when cut. */
  excerpt(ptr: usize, size: i32, max: i32): Bytes {
    const shown = size < max ? size : max;
    this.reserve(shown + 3);
    for (let i = 0; i < shown; i++) {
      const byte = load<u8>(ptr + i);
      store<u8>(changetype<usize>(this.data) + this.length + i, byte < 0x20 ? 0x3f : byte);
    }
    this.length += shown;
    return size > max ? this.str("...") : this;
  }

  /** Address of the bytes (valid until the next append). */
  ptr(): usize {
    return changetype<usize>(this.data);
  }

  /** A copy of the bytes appended so far, sized exactly. */
  toArrayBuffer(): ArrayBuffer {
    const result = new ArrayBuffer(this.length);
    memory.copy(changetype<usize>(result), this.ptr(), this.length);
    return result;
  }
}
