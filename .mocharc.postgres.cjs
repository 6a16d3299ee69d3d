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
    'test/store/postgres-store.test.ts',
    'test/store/several-machines.test.ts',
    'test/store/store-backup.test.ts',
    // No store, or SQLite's own adapter.
    'test/http/api-reference.test.ts',
    'test/app/app-mime.test.ts',
    'test/cli/config.test.ts',
    'test/repository/corpus-ci.test.ts',
    'test/cli/demo.test.ts',
    'test/auth/device-name.test.ts',
    'test/repository/doc-citations.test.ts',
    'test/mail/dovecot-lmtp.test.ts',
    'test/events/event-schemas.test.ts',
    'test/events/event-store.test.ts',
    'test/events/event-versions.test.ts',
    'test/http/ids.test.ts',
    'test/cli/mailenv.test.ts',
    'test/repository/open-handles.test.ts',
    'test/http/openapi.test.ts',
    'test/send/outbox-store.test.ts',
    'test/repository/readme.test.ts',
    'test/send/relay-pool.test.ts',
    'test/crypto/seal.test.ts',
    'test/send/send-parsing.test.ts',
    'test/store/sqlite-kept-rows.test.ts',
    'test/http/sse-parser.test.ts',
    'test/store/wal-checkpointer.test.ts',
    'test/webhooks/webhook-client.test.ts',
    'test/webhooks/webhook-dispatcher-parts.test.ts',
    'test/webhooks/webhook-signature.test.ts',
    'test/http/wire.test.ts',
  ],
};
