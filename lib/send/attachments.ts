// Attachments of a JSON compose (docs/sending.md, "Attachments"): their content type checked
// against their bytes, their names made safe. A claim the bytes contradict (a declared type, or
// the name's extension, saying PDF over the bytes of a Windows program) is refused with the
// reason, never quietly corrected: the caller learns its file is not what it said, and a
// recipient is never handed a program labelled as a document.
import { detectMimeType } from 'nodemailer/lib/mime-funcs/index.js';
import { invalid, unprocessable } from '../errors.ts';

/** What the first bytes of a file show it to be, by its format's signature. */
interface Signature {
  /** The format, as the error names it. */
  name: string;
  /** The type a file of this format is sent as when the caller declares none. */
  type: string;
  test: (b: Buffer) => boolean;
  /** Declared types the format may carry (its own first); every other declared type is a contradiction. */
  accepts: RegExp;
}

const at = (b: Buffer, offset: number, magic: string | number[]) => {
  const bytes = typeof magic === 'string' ? Buffer.from(magic, 'latin1') : Buffer.from(magic);
  return b.length >= offset + bytes.length && b.subarray(offset, offset + bytes.length).equals(bytes);
};

/** Formats with an unmistakable signature (the common ones of mail, and programs). */
const SIGNATURES: readonly Signature[] = [
  { name: 'PDF', type: 'application/pdf', test: (b) => at(b, 0, '%PDF-'), accepts: /^application\/(pdf|x-pdf|acrobat)$/ },
  {
    name: 'PNG',
    type: 'image/png',
    test: (b) => at(b, 0, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    accepts: /^image\/(png|apng|x-png)$/,
  },
  { name: 'JPEG', type: 'image/jpeg', test: (b) => at(b, 0, [0xff, 0xd8, 0xff]), accepts: /^image\/(jpeg|jpg|pjpeg)$/ },
  { name: 'GIF', type: 'image/gif', test: (b) => at(b, 0, 'GIF87a') || at(b, 0, 'GIF89a'), accepts: /^image\/gif$/ },
  { name: 'WebP', type: 'image/webp', test: (b) => at(b, 0, 'RIFF') && at(b, 8, 'WEBP'), accepts: /^image\/webp$/ },
  {
    // OOXML, OpenDocument, EPUB, JAR and APK are ZIP files too.
    name: 'ZIP',
    type: 'application/zip',
    test: (b) => at(b, 0, [0x50, 0x4b, 0x03, 0x04]) || at(b, 0, [0x50, 0x4b, 0x05, 0x06]),
    accepts:
      /^application\/(zip|x-zip|x-zip-compressed|vnd\.openxmlformats-officedocument\..+|vnd\.oasis\.opendocument\..+|vnd\.ms-[\w.-]+\.macroenabled\.[\w.]+|epub\+zip|java-archive|x-java-archive|vnd\.android\.package-archive|vnd\.apple\.[\w.+-]+)$/,
  },
  {
    name: 'gzip',
    type: 'application/gzip',
    test: (b) => at(b, 0, [0x1f, 0x8b]),
    accepts: /^application\/(gzip|x-gzip|x-tar\+gzip|x-compressed-tar)$/,
  },
  {
    // Word 97, Excel 97, PowerPoint 97 and Outlook's .msg are OLE compound files.
    name: 'OLE compound file',
    type: 'application/x-ole-storage',
    test: (b) => at(b, 0, [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1]),
    accepts: /^application\/(x-ole-storage|msword|vnd\.ms-[\w.-]+|vnd\.visio|x-msi|x-ms-installer|x-msg)$/,
  },
  {
    name: 'Windows program',
    type: 'application/x-msdownload',
    test: (b) => at(b, 0, 'MZ'),
    accepts: /^application\/(x-msdownload|x-dosexec|vnd\.microsoft\.portable-executable|x-ms-dos-executable)$/,
  },
  {
    name: 'ELF program',
    type: 'application/x-executable',
    test: (b) => at(b, 0, [0x7f, 0x45, 0x4c, 0x46]),
    accepts: /^application\/(x-executable|x-elf|x-sharedlib)$/,
  },
];

/** A declared type with no claim about the bytes: any bytes may carry it. */
const NO_CLAIM = /^application\/octet-stream$/;
/** A MIME type (RFC 2045 token "/" token), without parameters. */
const MIME_TYPE = /^[a-z0-9][\w!#$&^.+-]{0,126}\/[a-z0-9][\w!#$&^.+-]{0,126}$/;

const sniff = (bytes: Buffer): Signature | null => SIGNATURES.find((s) => s.test(bytes)) ?? null;

/** The signature a type claims, when it names a format that has one. */
const claimedBy = (type: string): Signature | null => SIGNATURES.find((s) => s.accepts.test(type)) ?? null;

export interface AttachmentInput {
  filename?: string | undefined;
  contentType?: string | undefined;
  content: Buffer;
  /** Shown in the body (an image an HTML part refers to by Content-ID) rather than attached. */
  contentId?: string | undefined;
}

export interface CheckedAttachment {
  filename: string;
  contentType: string;
  content: Buffer;
  contentId?: string;
}

/**
 * A name a recipient's mail app can save as it is: no directories, no control or bidirectional
 * override characters (which make `exe.pdf` read as `fdp.exe`), none of the characters Windows
 * refuses, no leading or trailing dots or spaces, at most 200 characters with its extension kept.
 */
export function safeFilename(name: string | undefined, fallback: string): string {
  let safe = (name ?? '')
    .normalize('NFC')
    .replace(/^.*[/\\]/, '')
    .replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '')
    .replace(/[<>:"|?*]/g, '_')
    .replace(/\s+/g, ' ')
    .replace(/^[\s.]+|[\s.]+$/g, '');
  if (safe.length > 200) {
    const dot = safe.lastIndexOf('.');
    const ext = dot > 0 && safe.length - dot <= 16 ? safe.slice(dot) : '';
    safe = [...safe.slice(0, 200 - ext.length)].join('') + ext;
  }
  return safe || fallback;
}

/** The extension's type, or null when the name has no extension nodemailer knows. */
function typeOfName(name: string): string | null {
  if (!/\.[A-Za-z0-9]{1,10}$/.test(name)) return null;
  const type = detectMimeType(name);
  return type === 'application/octet-stream' ? null : type;
}

/**
 * The attachment as it is sent: its safe name and the type its bytes support. 400 for a type
 * that is not one; 422 when the declared type or the name's extension claims a format the bytes
 * are not (or the bytes are a format the claim excludes).
 */
export function checkAttachment(a: AttachmentInput, index: number): CheckedAttachment {
  const what = `attachment ${index}`;
  const declared = a.contentType?.split(';')[0]!.trim().toLowerCase();
  if (declared !== undefined && !MIME_TYPE.test(declared))
    throw invalid(`${what}: contentType ${JSON.stringify(a.contentType)} is not a MIME type`);
  const found = sniff(a.content);
  const byName = a.filename ? typeOfName(safeFilename(a.filename, '')) : null;
  const filename = safeFilename(a.filename, `attachment-${index + 1}${found ? `.${extensionOf(found.type)}` : ''}`);
  for (const [claim, source] of [
    [declared, 'its contentType'],
    [byName, `its name's extension`],
  ] as const) {
    if (!claim || NO_CLAIM.test(claim)) continue;
    const contradiction = contradicts(claim, found, a.content);
    if (contradiction) throw unprocessable(`${what} (${filename}): ${source} says ${claim} but ${contradiction}`);
  }
  const contentType = declared && !NO_CLAIM.test(declared) ? declared : (found?.type ?? byName ?? declared ?? 'application/octet-stream');
  return { filename, contentType, content: a.content, ...(a.contentId ? { contentId: a.contentId } : {}) };
}

/** Why `claim` does not fit the bytes, or null when it does. */
function contradicts(claim: string, found: Signature | null, bytes: Buffer): string | null {
  if (found) return found.accepts.test(claim) ? null : `its bytes are a ${found.name} file`;
  const wanted = claimedBy(claim);
  if (wanted) return `its bytes are not a ${wanted.name} file`;
  // Text holds no NUL: a text type over bytes that have one is a binary file misnamed.
  if (claim.startsWith('text/') && bytes.subarray(0, 8192).includes(0)) return 'its bytes are binary, not text';
  return null;
}

function extensionOf(type: string): string {
  return (
    (
      { 'application/x-ole-storage': 'bin', 'application/x-msdownload': 'exe', 'application/x-executable': 'bin' } as Record<string, string>
    )[type] ?? type.split('/')[1]!
  );
}
