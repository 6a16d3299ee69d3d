// The suite's second pass (npm run test:postgres): every test that serves from a store, with
// POSTERN_TEST_STORE=postgres. Left out: tests that never touch a store or test one engine's
// adapter directly, and those that already run on both engines in the first pass (the contract
// suite, PostgreSQL's own tests, several machines, backup and restore).
const base = require('./.mocharc.json');

module.exports = {
  ...base,
  spec: ['test/**/*.test.ts'],
  ignore: [
    'test/store-contract/**',
    'test/postgres-store.test.ts',
    'test/several-machines.test.ts',
    'test/store-backup.test.ts',
    // No store, or SQLite's own adapter.
    'test/api-reference.test.ts',
    'test/app-mime.test.ts',
    'test/config.test.ts',
    'test/corpus-ci.test.ts',
    'test/demo.test.ts',
    'test/device-name.test.ts',
    'test/doc-citations.test.ts',
    'test/dovecot-lmtp.test.ts',
    'test/event-schemas.test.ts',
    'test/event-store.test.ts',
    'test/event-versions.test.ts',
    'test/ids.test.ts',
    'test/mailenv.test.ts',
    'test/open-handles.test.ts',
    'test/openapi.test.ts',
    'test/outbox-store.test.ts',
    'test/readme.test.ts',
    'test/relay-pool.test.ts',
    'test/seal.test.ts',
    'test/send-parsing.test.ts',
    'test/sqlite-kept-rows.test.ts',
    'test/sse-parser.test.ts',
    'test/wal-checkpointer.test.ts',
    'test/webhook-client.test.ts',
    'test/webhook-dispatcher-parts.test.ts',
    'test/webhook-signature.test.ts',
    'test/wire.test.ts',
  ],
};
