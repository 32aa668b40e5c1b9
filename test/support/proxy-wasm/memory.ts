// A VM's linear memory as host calls read and write it, the way proxy-wasm-cpp-host does
// (copyToPointerSize, header pairs); the buffer is re-read every time, as malloc may grow it.
import { WasmResult } from "./abi.ts";

/** Reads and writes one VM's linear memory. */
export class VmMemory {
  readonly #memory: () => WebAssembly.Memory;
  readonly #malloc: (size: number) => number;

  /**
   * @param memory The instance's memory (a getter: the instance exists only after its imports)
   * @param malloc The module's allocator, for values handed to it
   */
  constructor(memory: () => WebAssembly.Memory, malloc: (size: number) => number) {
    this.#memory = memory;
    this.#malloc = malloc;
  }

  /** The memory's current buffer. */
  get buffer(): ArrayBuffer {
    return this.#memory().buffer;
  }

  /** A view of `size` bytes at `ptr`; throws when out of bounds. */
  bytes(ptr: number, size: number): Uint8Array {
    const end = ptr + size;
    if (ptr < 0 || end > this.buffer.byteLength) throw new RangeError("out of bounds");
    return new Uint8Array(this.buffer, ptr, size);
  }

  /** The UTF-8 text of `size` bytes at `ptr`. */
  string(ptr: number, size: number): string {
    return Buffer.from(this.bytes(ptr, size)).toString("utf8");
  }

  /** Writes a little-endian u32. */
  setU32(ptr: number, value: number): void {
    new DataView(this.buffer).setUint32(ptr, value, true);
  }

  /** Writes a little-endian u64. */
  setU64(ptr: number, value: bigint): void {
    new DataView(this.buffer).setBigUint64(ptr, BigInt.asUintN(64, value), true);
  }

  /** cpp-host copyToPointerSize: malloc in the module, copy, write pointer and size (0/0 if empty). */
  copyOut(data: Uint8Array, ptrPtr: number, sizePtr: number): number {
    let pointer = 0;
    if (data.length > 0) {
      pointer = this.#malloc(data.length) >>> 0;
      if (pointer === 0) return WasmResult.InvalidMemoryAccess;
      this.bytes(pointer, data.length).set(data);
    }
    this.setU32(ptrPtr, pointer);
    this.setU32(sizePtr, data.length);
    return WasmResult.Ok;
  }

  /** Header pairs as proxy-wasm serialises them: count, then sizes, then NUL-ended keys and values. */
  pairs(ptr: number, size: number): [string, string][] {
    if (size < 4) return [];
    const view = new DataView(this.buffer, ptr, size);
    const count = view.getUint32(0, true);
    if (4 + count * 8 > size) return [];
    const result: [string, string][] = [];
    let offset = 4 + count * 8;
    for (let i = 0; i < count; i++) {
      const keySize = view.getUint32(4 + i * 8, true);
      const valueSize = view.getUint32(8 + i * 8, true);
      const key = this.string(ptr + offset, keySize);
      offset += keySize + 1;
      const value = this.string(ptr + offset, valueSize);
      offset += valueSize + 1;
      result.push([key, value]);
    }
    return result;
  }
}
