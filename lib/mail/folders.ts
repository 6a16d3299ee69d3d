// Folders and deleting forever (docs/organize.md, "Folders", "Delete forever"): creating,
// renaming and deleting labels, and expunging a message from every label. Extensions of version
// 1, named after JMAP's Mailbox/set and Email/set destroy. Like every other change, each is
// made on the mail server, then read back through the sync, which records the events.
import { conflict, invalid, isDomainError, notFound, unavailable, unprocessable } from '../errors.ts';
import { guidFromId, idFromGuid } from '../ids.ts';
import type { Label } from '../../schemas/wire.ts';
import { compareLabels } from './labels.ts';
import type { MailMirror } from './mirror.ts';
import type { LabelChangeAnnouncer, MailService } from './service.ts';
import type { LabelChange, LabelState, Location, MailInbox } from './types.ts';
import type { MailIndexStore, MailSource } from './ports.ts';

/** The mail server's folders (adapters/imap/folders.ts). */
export interface FolderSource {
  /** The hierarchy delimiter of the inbox's personal namespace; null: flat names. */
  delimiter(inbox: MailInbox): Promise<string | null>;
  /** Creates the folder and subscribes to it; a conflict when it exists. */
  create(inbox: MailInbox, path: string): Promise<void>;
  /** Renames it (its sub-folders with it) and moves the subscription. */
  rename(inbox: MailInbox, label: LabelState, to: string): Promise<void>;
  /** Deletes it, after moving all its mail to `moveTo` when given (its mail goes with it otherwise). */
  remove(inbox: MailInbox, label: LabelState, moveTo: LabelState | null): Promise<void>;
}

/** Told of a label change the API is about to make (`key`: the new name, or the label's GUID). Returns the withdrawal. */
export type FolderChangeAnnouncer = (inboxId: string, type: LabelChange['type'], key: string, actor: string) => () => void;

/** Told of many messages about to move at once (a label's mail before its deletion). */
export type MovesAnnouncer = (
  inboxId: string,
  msgIds: readonly string[],
  added: readonly string[],
  removed: readonly string[],
  actor: string,
) => () => void;

/** Characters of a whole name, and of each part between delimiters (docs/organize.md, "Names"). */
export const MAX_LABEL_NAME = 200;
export const MAX_LABEL_PART = 100;

const ATTEMPTS = 3;

/**
 * A label name as the mail server will hold it, or a 400 saying what is wrong with it: not
 * empty, at most MAX_LABEL_NAME characters, no control characters, no IMAP wildcard (`*`, `%`),
 * no empty part (a delimiter first, last or twice in a row), no part with spaces around it or
 * named `.` or `..`. INBOX is case-insensitive (RFC 3501 5.1): a first part spelled `inbox` in any
 * case is INBOX.
 */
export function labelPath(name: string, delimiter: string | null): string {
  if (name.length === 0) throw invalid('a label name cannot be empty');
  if (name.length > MAX_LABEL_NAME) throw invalid(`a label name has at most ${MAX_LABEL_NAME} characters`);
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what it refuses
  if (/[\u0000-\u001f\u007f]/.test(name)) throw invalid('a label name cannot hold control characters');
  if (/[*%]/.test(name)) throw invalid('a label name cannot hold * or % (IMAP wildcards)');
  const parts = delimiter ? name.split(delimiter) : [name];
  for (const part of parts) {
    if (part === '') throw invalid(`a label name cannot start or end with the delimiter ${delimiter ?? ''}, or hold two in a row`);
    if (part.trim() !== part) throw invalid('a part of a label name cannot start or end with a space');
    if (part.length > MAX_LABEL_PART) throw invalid(`each part of a label name has at most ${MAX_LABEL_PART} characters`);
    if (part === '.' || part === '..') throw invalid('a part of a label name cannot be . or ..');
  }
  if (parts[0]!.toUpperCase() === 'INBOX') parts[0] = 'INBOX';
  return parts.join(delimiter ?? '');
}

export interface MailFoldersOptions {
  index: MailIndexStore;
  mirror: MailMirror;
  /** For the labels as GET …/labels lists them (the answers). */
  mail: MailService;
  /** For deleting forever: the expunges, as a label removal makes them. */
  source: MailSource;
  folders: FolderSource;
  /** Told of each change before it is made, and whose it is (the event log's actor). */
  announceFolder?: FolderChangeAnnouncer;
  announceLabels?: LabelChangeAnnouncer;
  announceMoves?: MovesAnnouncer;
}

const SPECIAL_WORDS = { archive: '\\Archive', trash: '\\Trash', junk: '\\Junk' } as const;

export class MailFolders {
  /** Each mail server's delimiter, asked once per process (it is the server's, not the inbox's). */
  private delimiterOf: Promise<string | null> | null = null;

  private readonly index: MailIndexStore;
  private readonly mirror: MailMirror;
  private readonly mail: MailService;
  private readonly source: MailSource;
  private readonly folders: FolderSource;
  private readonly announceFolder: FolderChangeAnnouncer;
  private readonly announceLabels: LabelChangeAnnouncer;
  private readonly announceMoves: MovesAnnouncer;

  constructor(o: MailFoldersOptions) {
    this.index = o.index;
    this.mirror = o.mirror;
    this.mail = o.mail;
    this.source = o.source;
    this.folders = o.folders;
    this.announceFolder = o.announceFolder ?? (() => () => undefined);
    this.announceLabels = o.announceLabels ?? (() => () => undefined);
    this.announceMoves = o.announceMoves ?? (() => () => undefined);
  }

  private delimiter(inbox: MailInbox): Promise<string | null> {
    this.delimiterOf ??= this.folders.delimiter(inbox).catch((err: unknown) => {
      this.delimiterOf = null;
      throw err;
    });
    return this.delimiterOf;
  }

  /** docs/organize.md, "Create": a new label, subscribed; answers it as GET …/labels lists it. */
  async create(inbox: MailInbox, name: string, actor: string): Promise<Label> {
    const path = labelPath(name, await this.delimiter(inbox));
    await this.mirror.refresh(inbox);
    this.clash(await this.index.labels(inbox.id), path);
    const withdraw = this.announceFolder(inbox.id, 'label.created', path, actor);
    await this.change(withdraw, () => this.folders.create(inbox, path));
    await this.readBack(inbox);
    return this.answer(inbox, (l) => l.name === path, 'the label was created but the mail server does not list it; read the labels again');
  }

  /** docs/organize.md, "Rename": the same label (same id, same mail) under a new name. */
  async rename(inbox: MailInbox, labelId: string, name: string, actor: string): Promise<Label> {
    const path = labelPath(name, await this.delimiter(inbox));
    await this.mirror.refresh(inbox);
    const labels = await this.index.labels(inbox.id);
    const label = this.own(labels, labelId, 'renamed');
    if (label.path === path) return this.answer(inbox, (l) => l.id === labelId, 'label not found');
    this.clash(labels, path);
    // The labels under it are renamed with it, by the same hand.
    const delimiter = await this.delimiter(inbox);
    const under = delimiter ? labels.filter((l) => l.path.startsWith(label.path + delimiter)) : [];
    const withdraws = [label, ...under].map((l) => this.announceFolder(inbox.id, 'label.renamed', l.guid, actor));
    await this.change(
      () => withdraws.forEach((w) => w()),
      () => this.folders.rename(inbox, label, path),
    );
    await this.readBack(inbox);
    return this.answer(inbox, (l) => l.id === labelId, 'label not found');
  }

  /**
   * docs/organize.md, "Delete": a label that holds mail is deleted only with a choice: `moveTo`
   * (a label id, or inbox, archive, trash, junk) takes its mail there first; `removeMessages`
   * lets its mail go with it (the route has checked the caller may destroy mail). Messages also
   * in other labels stay there either way.
   */
  async remove(inbox: MailInbox, labelId: string, choice: { moveTo?: string; removeMessages?: boolean }, actor: string): Promise<void> {
    if (choice.moveTo !== undefined && choice.removeMessages) throw invalid('give moveTo or removeMessages, not both');
    await this.mirror.refresh(inbox);
    const labels = await this.index.labels(inbox.id);
    const label = this.own(labels, labelId, 'deleted');
    const delimiter = await this.delimiter(inbox);
    if (delimiter && labels.some((l) => l.path.startsWith(label.path + delimiter)))
      throw conflict(`the label ${label.path} has labels under it: delete or move them first`);
    const moveTo = choice.moveTo === undefined ? null : this.target(labels, choice.moveTo);
    if (moveTo?.guid === label.guid) throw invalid('moveTo is the label being deleted');
    const held = await this.index.countIn(inbox.id, label.guid);
    if (held > 0 && !moveTo && !choice.removeMessages)
      throw conflict(
        `the label ${label.path} holds ${held} message${held === 1 ? '' : 's'}: move them with moveTo=<label id, inbox, archive, trash or junk>, or delete them with it (removeMessages=true)`,
      );
    const withdraws = [this.announceFolder(inbox.id, 'label.deleted', label.guid, actor)];
    if (moveTo && held > 0)
      withdraws.push(this.announceMoves(inbox.id, await this.msgIds(inbox.id, label.guid), [moveTo.guid], [label.guid], actor));
    await this.change(
      () => {
        for (const w of withdraws) w();
      },
      () => this.folders.remove(inbox, label, moveTo),
    );
    await this.readBack(inbox);
  }

  /**
   * docs/organize.md, "Delete forever": expunges the message from every label it is in. Without
   * `confirm`, only a message every label of which is \Trash or \Junk (a conflict otherwise): it
   * cannot be undone. The route has checked the caller may destroy mail.
   */
  async destroy(inbox: MailInbox, msgId: string, confirm: boolean, actor: string): Promise<void> {
    await this.mirror.refresh(inbox);
    const labels = await this.index.labels(inbox.id);
    const bin = new Set(labels.filter((l) => l.specialUse === '\\Trash' || l.specialUse === '\\Junk').map((l) => l.guid));
    for (let attempt = 1; ; attempt++) {
      const locations = await this.locations(inbox.id, msgId);
      if (locations.length === 0) {
        if (attempt === 1) throw notFound('message not found');
        return;
      }
      const outside = locations.filter((l) => !bin.has(l.labelGuid));
      if (!confirm && outside.length > 0) {
        const names = labels
          .filter((l) => outside.some((o) => o.labelGuid === l.guid))
          .sort(compareLabels)
          .map((l) => l.path);
        throw conflict(
          `the message is in ${names.join(', ')}: deleting forever cannot be undone, so it is allowed from trash or junk only; move it to trash first, or confirm (confirm=true)`,
        );
      }
      const guids = locations.map((l) => l.labelGuid);
      const withdraw = this.announceLabels(inbox.id, msgId, [], guids, actor);
      const first = locations[0]!;
      let missed = false;
      await this.change(withdraw, async () => {
        ({ missed } = await this.source.relabel(inbox, {
          from: { labelGuid: first.labelGuid, uid: first.uid },
          add: [],
          remove: locations.map((l) => ({ labelGuid: l.labelGuid, uid: l.uid })),
        }));
      });
      await this.readBack(inbox);
      // Gone from every label: done. Still somewhere (a mail app copied it meanwhile): again.
      if ((await this.locations(inbox.id, msgId)).length === 0) return;
      if (missed) withdraw();
      if (attempt >= ATTEMPTS) throw unavailable('the message keeps moving on the mail server; try again');
    }
  }

  private async locations(inboxId: string, msgId: string): Promise<Location[]> {
    const guid = guidFromId('msg', msgId);
    return guid ? ((await this.index.message(inboxId, guid))?.locations ?? []) : [];
  }

  private async msgIds(inboxId: string, labelGuid: string): Promise<string[]> {
    const out: string[] = [];
    for (let after = 0; ; ) {
      const rows = await this.index.uidsOf(inboxId, labelGuid, after, 5000);
      for (const r of rows) out.push(idFromGuid('msg', r.msgGuid));
      if (rows.length < 5000) return out;
      after = rows.at(-1)!.uid;
    }
  }

  /** A label of the inbox that may be renamed or deleted: not INBOX, not a special-use folder. */
  private own(labels: readonly LabelState[], labelId: string, what: string): LabelState {
    const guid = guidFromId('lbl', labelId);
    const label = guid ? labels.find((l) => l.guid === guid) : undefined;
    if (!label) throw notFound('label not found');
    if (label.path.toUpperCase() === 'INBOX') throw conflict(`INBOX cannot be ${what}`);
    if (label.specialUse) throw conflict(`${label.path} is the inbox's ${label.specialUse} folder: it cannot be ${what}`);
    return label;
  }

  private clash(labels: readonly LabelState[], path: string): void {
    if (path === 'INBOX') throw conflict('INBOX exists in every inbox');
    if (labels.some((l) => l.path === path)) throw conflict(`a label named ${path} already exists`);
  }

  /** Where a label's mail goes: a label id, or inbox, archive, trash, junk (as …/move takes them). */
  private target(labels: readonly LabelState[], to: string): LabelState {
    let found: LabelState | undefined;
    if (to === 'inbox') found = labels.find((l) => l.path.toUpperCase() === 'INBOX');
    else if (to === 'archive' || to === 'trash' || to === 'junk') {
      found = labels.find((l) => l.specialUse === SPECIAL_WORDS[to]);
      if (!found) throw conflict(`this inbox has no ${SPECIAL_WORDS[to]} folder (the mail server declares none)`);
    } else {
      const guid = guidFromId('lbl', to);
      found = guid ? labels.find((l) => l.guid === guid) : undefined;
    }
    if (!found) throw unprocessable(`label ${to} does not exist in this inbox`);
    return found;
  }

  /** The change on the mail server; the announcement withdrawn when it did not happen. */
  private async change(withdraw: () => void, make: () => Promise<void>): Promise<void> {
    try {
      await make();
    } catch (err) {
      withdraw();
      if (isDomainError(err)) throw err;
      throw unavailable('the mail server did not accept the change; try again');
    }
  }

  private async readBack(inbox: MailInbox): Promise<void> {
    await this.mirror.syncNow(inbox).catch((err: unknown) => {
      throw isDomainError(err) && err.kind === 'unavailable'
        ? err
        : unavailable('the change was made but could not be read back from the mail server; try again');
    });
  }

  private async answer(inbox: MailInbox, which: (l: Label) => boolean, missing: string): Promise<Label> {
    const found = (await this.mail.labels(inbox)).find(which);
    if (!found) throw unavailable(missing);
    return found;
  }
}
