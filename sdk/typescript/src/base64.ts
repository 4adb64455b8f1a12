// Standard base64 for file contents, with the platform's own codec where it has one (Uint8Array's
// toBase64/fromBase64) and atob/btoa, which every runtime the SDK supports has, elsewhere.

interface Base64Array {
  toBase64?: () => string;
}
interface Base64Ctor {
  fromBase64?: (s: string) => Uint8Array;
}

/** Encodes bytes as standard base64. */
export function encodeBase64(bytes: Uint8Array): string {
  const native = (bytes as Base64Array).toBase64;
  if (typeof native === "function") return native.call(bytes);
  let bin = "";
  const step = 0x8000;
  for (let i = 0; i < bytes.length; i += step) {
    bin += String.fromCharCode(...bytes.subarray(i, i + step));
  }
  return btoa(bin);
}

/** Decodes standard base64. */
export function decodeBase64(s: string): Uint8Array {
  const native = (Uint8Array as Base64Ctor).fromBase64;
  if (typeof native === "function") return native(s);
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
