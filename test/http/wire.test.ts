// schemas/wire.ts (the TypeScript the server and the web app share) and the JSON Schemas (what the
// server validates against and publishes) say the same thing: every interface has its schema's
// keys, required exactly where the schema requires them, with the same enums and references.
// Read with the TypeScript parser, so the check follows the file as written.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import ts from 'typescript';
import { FLAGS } from '../../lib/mail/flags.ts';
import { SPECIAL_USES } from '../../lib/mail/labels.ts';
import { SCHEMAS_DIR } from '../../lib/paths.ts';

type Schema = { [key: string]: unknown };

/** Each wire type and the schema it mirrors: `file.json#/pointer`. */
const MIRRORS: Record<string, string> = {
  Flag: 'common.json#/$defs/Flag',
  WebFlag: 'common.json#/$defs/WebFlag',
  SpecialUse: 'mail.json#/$defs/Label/properties/specialUse',
  InboxGrant: 'common.json#/$defs/InboxGrant',
  InboxList: 'common.json#/$defs/InboxList',
  Label: 'mail.json#/$defs/Label',
  LabelList: 'mail.json#/$defs/LabelList',
  MessageSummary: 'mail.json#/$defs/MessageSummary',
  MessageList: 'mail.json#/$defs/MessageList',
  MessageSearchPage: 'mail.json#/$defs/MessageSearchPage',
  ThreadCounts: 'mail.json#/$defs/ThreadCounts',
  Thread: 'mail.json#/$defs/Thread',
  MessageDetail: 'mail.json#/$defs/MessageDetail',
  FlagChange: 'mail.json#/$defs/FlagChange',
  FlagsResponse: 'mail.json#/$defs/FlagsResponse',
  LabelChange: 'mail.json#/$defs/LabelChange',
  LabelLiveChange: 'mail.json#/$defs/LabelLiveChange',
  LabelName: 'mail.json#/$defs/LabelName',
  KeywordChange: 'mail.json#/$defs/KeywordChange',
  KeywordsResponse: 'mail.json#/$defs/KeywordsResponse',
  MessageMove: 'mail.json#/$defs/MessageMove',
  MessagePlacement: 'mail.json#/$defs/MessagePlacement',
  BulkChange: 'mail.json#/$defs/BulkChange',
  BulkResult: 'mail.json#/$defs/BulkResult',
  BulkFlagChange: 'mail.json#/$defs/BulkChange/properties/flags',
  BulkDestroy: 'mail.json#/$defs/BulkDestroy',
  BulkOutcome: 'mail.json#/$defs/BulkResult/properties/results/items',
  LiveChange: 'mail.json#/$defs/LiveChange',
  EpochKey: 'crypto.json#/$defs/EpochKeyList/properties/epochs/items',
  EpochKeyList: 'crypto.json#/$defs/EpochKeyList',
  UserKey: 'crypto.json#/$defs/UserKey',
  UserKeySet: 'crypto.json#/$defs/UserKeySet',
  ComposeData: 'crypto.json#/$defs/ComposeData',
  SendRequest: 'send.json#/$defs/SendRequest',
  SendResult: 'send.json#/$defs/SendResult',
  RawDraft: 'drafts.json#/$defs/RawDraft',
  Draft: 'drafts.json#/$defs/Draft',
  DraftDetail: 'drafts.json#/$defs/DraftDetail',
  DraftList: 'drafts.json#/$defs/DraftList',
  Identity: 'send.json#/$defs/Identity',
  IdentityList: 'send.json#/$defs/IdentityList',
  ReauthOperation: 'app.json#/$defs/ReauthOperation',
  Passkey: 'app.json#/$defs/Passkey',
  PasskeyList: 'app.json#/$defs/PasskeyList',
  SignedIn: 'app.json#/$defs/SignedIn',
  Session: 'app.json#/$defs/Session',
  SessionList: 'app.json#/$defs/SessionList',
  KeyBackup: 'app.json#/$defs/KeyBackup',
  KeyBackupWrite: 'app.json#/$defs/KeyBackupWrite',
  KeyHandoverRequest: 'app.json#/$defs/KeyHandoverRequest',
  KeyHandoverApproval: 'app.json#/$defs/KeyHandoverApproval',
  KeyHandover: 'app.json#/$defs/KeyHandover',
  KeyHandoverList: 'app.json#/$defs/KeyHandoverList',
  NewWebhook: 'webhooks.json#/$defs/NewWebhook',
  WebhookChange: 'webhooks.json#/$defs/WebhookChange',
  Webhook: 'webhooks.json#/$defs/Webhook',
  WebhookCreated: 'webhooks.json#/$defs/WebhookCreated',
  WebhookSecret: 'webhooks.json#/$defs/WebhookSecret',
  WebhookList: 'webhooks.json#/$defs/WebhookList',
  WebhookReplay: 'webhooks.json#/$defs/WebhookReplay',
  WebhookReplayStarted: 'webhooks.json#/$defs/WebhookReplayStarted',
  WebhookDelivery: 'webhooks.json#/$defs/WebhookDelivery',
  WebhookDeliveryList: 'webhooks.json#/$defs/WebhookDeliveryList',
  WebhookTestResult: 'webhooks.json#/$defs/WebhookTestResult',
};

const files = new Map<string, Schema>();
function schemaAt(location: string): Schema {
  const [file, pointer = ''] = location.split('#');
  let doc = files.get(file!);
  if (!doc) files.set(file!, (doc = JSON.parse(readFileSync(join(SCHEMAS_DIR, file!), 'utf8')) as Schema));
  let node: unknown = doc;
  for (const part of pointer.split('/').filter(Boolean)) node = (node as Schema)[part];
  if (!node || typeof node !== 'object') throw new Error(`no schema at ${location}`);
  return node as Schema;
}

/** A $ref written in `file`, as `file.json#/pointer`. */
const absolute = (file: string, ref: string) => (ref.startsWith('#') ? `${file}${ref}` : ref);

const source = ts.createSourceFile('wire.ts', readFileSync(join(SCHEMAS_DIR, 'wire.ts'), 'utf8'), ts.ScriptTarget.ES2022, true);
const interfaces = new Map<string, ts.InterfaceDeclaration>();
const aliases = new Map<string, ts.TypeAliasDeclaration>();
for (const s of source.statements) {
  if (ts.isInterfaceDeclaration(s)) interfaces.set(s.name.text, s);
  else if (ts.isTypeAliasDeclaration(s)) aliases.set(s.name.text, s);
}

/** The string literals of a union like `'a' | 'b'`, or null when it is something else. */
function literals(type: ts.TypeNode): unknown[] | null {
  const parts = ts.isUnionTypeNode(type) ? type.types : [type];
  const out: unknown[] = [];
  for (const p of parts) {
    if (!ts.isLiteralTypeNode(p)) return null;
    if (ts.isStringLiteral(p.literal)) out.push(p.literal.text);
    else if (p.literal.kind === ts.SyntaxKind.TrueKeyword) out.push(true);
    else return null;
  }
  return out;
}

/** The values the schema allows, when it lists them. */
const allowed = (schema: Schema): unknown[] | undefined =>
  'const' in schema ? [schema.const] : Array.isArray(schema.enum) ? schema.enum : undefined;

/** Checks that a TypeScript type says what the schema at `at` (in `file`) says. */
function agree(type: ts.TypeNode, schema: Schema, file: string, at: string): void {
  if (typeof schema.$ref === 'string') {
    const target = absolute(file, schema.$ref);
    const name = ts.isTypeReferenceNode(type) ? type.typeName.getText(source) : undefined;
    if (name && MIRRORS[name]) {
      expect(schemaAt(MIRRORS[name]), `${at}: ${name} is what ${target} is`).to.equal(schemaAt(target));
      return;
    }
    // A $ref to a plain string shape (an id, an address): the type is a string.
    agree(type, schemaAt(target), target.split('#')[0]!, at);
    return;
  }
  if (ts.isParenthesizedTypeNode(type)) return agree(type.type, schema, file, at);
  if (ts.isArrayTypeNode(type)) {
    expect(schema.type, `${at} is an array`).to.equal('array');
    return agree(type.elementType, schema.items as Schema, file, `${at}[]`);
  }
  if (ts.isTypeReferenceNode(type)) {
    const name = type.typeName.getText(source);
    const mirror = MIRRORS[name];
    expect(mirror, `${at}: ${name} mirrors a schema`).to.be.a('string');
    const alias = aliases.get(name);
    // An enum the schema spells inline rather than by reference: the same values.
    if (alias) expect(allowed(schema), `${at}: the values of ${name}`).to.deep.equal(allowed(schemaAt(mirror!)));
    else expect(schema, `${at} is ${name}`).to.deep.equal(schemaAt(mirror!));
    return;
  }
  const values = literals(type);
  if (values) {
    expect(allowed(schema), `${at}: its values`).to.deep.equal(values);
    return;
  }
  if (ts.isUnionTypeNode(type)) {
    // `T | null`: the schema's anyOf of T's schema and null.
    const nonNull = type.types.filter((t) => !(ts.isLiteralTypeNode(t) && t.literal.kind === ts.SyntaxKind.NullKeyword));
    expect(nonNull.length, `${at}: a union other than T | null`).to.equal(type.types.length - 1);
    const options = schema.anyOf as Schema[] | undefined;
    expect(
      options?.some((o) => o.type === 'null'),
      `${at} may be null`,
    ).to.equal(true);
    const other = options!.filter((o) => o.type !== 'null');
    expect(other.length, `${at}: one other option`).to.equal(1);
    return agree(nonNull[0]!, other[0]!, file, at);
  }
  const primitive: Partial<Record<ts.SyntaxKind, string[]>> = {
    [ts.SyntaxKind.StringKeyword]: ['string'],
    [ts.SyntaxKind.NumberKeyword]: ['integer', 'number'],
    [ts.SyntaxKind.BooleanKeyword]: ['boolean'],
  };
  const kinds = primitive[type.kind];
  if (!kinds) throw new Error(`${at}: no check for the type ${type.getText(source)}`);
  expect(kinds, `${at} is ${type.getText(source)}`).to.include(schema.type);
}

describe('wire types (schemas/wire.ts) and JSON Schemas', () => {
  it('wire.ts imports nothing: it is types only, for the server and the browser alike', () => {
    expect(source.statements.filter((s) => ts.isImportDeclaration(s)).map((s) => s.getText(source))).to.deep.equal([]);
    for (const s of source.statements) {
      expect(ts.isInterfaceDeclaration(s) || ts.isTypeAliasDeclaration(s), s.getText(source).slice(0, 60)).to.equal(true);
    }
  });

  it('every wire type names the schema it mirrors', () => {
    expect([...interfaces.keys(), ...aliases.keys()].sort()).to.deep.equal(Object.keys(MIRRORS).sort());
  });

  for (const [name, location] of Object.entries(MIRRORS)) {
    it(`${name} agrees with ${location}`, () => {
      const schema = schemaAt(location);
      const file = location.split('#')[0]!;
      const alias = aliases.get(name);
      if (alias) {
        expect(allowed(schema), name).to.deep.equal(literals(alias.type));
        return;
      }
      const members = interfaces.get(name)!.members.filter(ts.isPropertySignature);
      const properties = (schema.properties ?? {}) as Record<string, Schema>;
      expect(members.map((m) => m.name.getText(source)).sort(), `${name}: its keys`).to.deep.equal(Object.keys(properties).sort());
      const required = members.filter((m) => !m.questionToken).map((m) => m.name.getText(source));
      expect(required.sort(), `${name}: its required keys`).to.deep.equal([...((schema.required as string[] | undefined) ?? [])].sort());
      for (const m of members) agree(m.type!, properties[m.name.getText(source)]!, file, `${name}.${m.name.getText(source)}`);
    });
  }

  it('the server lists every flag and special use the contract has, in its order', () => {
    expect([...FLAGS]).to.deep.equal(schemaAt(MIRRORS.Flag!).enum);
    expect([...SPECIAL_USES]).to.deep.equal(schemaAt(MIRRORS.SpecialUse!).enum);
  });
});
