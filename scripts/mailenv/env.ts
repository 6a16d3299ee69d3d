// What an environment looks like to its users (tests, the demo, Postern itself).
import { DOMAIN, INGRESS_DOMAIN, MASTER_USER, type Layout } from './layout.ts';
import { HOST, ports } from './ports.ts';
import { POSTGRES_DATABASE, POSTGRES_USER } from './services/postgres.ts';

export interface MailEnv {
  dir: string;
  /** The local mail domain, delivered into Dovecot. */
  domain: string;
  imap: { host: string; port: number };
  lmtp: { host: string; port: number };
  /** Postern's LMTP ingress: where Postfix delivers `domain` mail for, when a Postern listens. */
  ingress: { host: string; port: number; domain: string };
  /** Postfix smtpd: where Postern submits mail, and the MX of `domain`. */
  smtp: { host: string; port: number };
  /** Postfix submission: SASL through Dovecot, the sender-login check; Postern relays here. */
  submission: { host: string; port: number };
  /** The SMTP sink that receives everything relayed outside `domain`. */
  sink: { host: string; port: number; dir: string };
  redis: { url: string };
  /**
   * The private PostgreSQL cluster and its database `postern` (superuser `postern`, a generated
   * password). Not in posternEnv(): Postern serves from SQLite unless told otherwise.
   */
  postgres: { host: string; port: number; url: string };
  /** Dovecot master user: log in as `user*master.user`, or SASL PLAIN with authzid = user. */
  master: { user: string; password: string };
  passwdFile: string;
  /** Where Dovecot's push hints go: a Postern started with POSTERN_HINT_LISTEN=listen and this secret receives them. */
  hints: { listen: string; secret: string };
}

export function describe(l: Layout, masterPassword: string, hintSecret: string, postgresPassword: string): MailEnv {
  const p = ports(l.basePort);
  return {
    dir: l.dir,
    domain: DOMAIN,
    imap: { host: HOST, port: p.imap },
    lmtp: { host: HOST, port: p.lmtp },
    ingress: { host: HOST, port: p.ingress, domain: INGRESS_DOMAIN },
    smtp: { host: HOST, port: p.smtp },
    submission: { host: HOST, port: p.submission },
    sink: { host: HOST, port: p.sink, dir: l.sinkMessagesDir },
    redis: { url: `redis://${HOST}:${p.redis}` },
    postgres: {
      host: HOST,
      port: p.postgres,
      url: `postgres://${POSTGRES_USER}:${encodeURIComponent(postgresPassword)}@${HOST}:${p.postgres}/${POSTGRES_DATABASE}`,
    },
    master: { user: MASTER_USER, password: masterPassword },
    passwdFile: l.passwdFile,
    hints: { listen: `${HOST}:${p.hints}`, secret: hintSecret },
  };
}

/** The POSTERN_* variables that point a Postern process at this environment. */
export function posternEnv(env: MailEnv): Record<string, string> {
  return {
    POSTERN_IMAP_HOST: env.imap.host,
    POSTERN_IMAP_PORT: String(env.imap.port),
    POSTERN_IMAP_MASTER_USER: env.master.user,
    POSTERN_IMAP_MASTER_PASSWORD: env.master.password,
    POSTERN_SMTP_HOST: env.submission.host,
    POSTERN_SMTP_PORT: String(env.submission.port),
    // Where an ingress hands mail on; the ingress itself listens only when POSTERN_LMTP_PORT is set.
    POSTERN_DOVECOT_LMTP_HOST: env.lmtp.host,
    POSTERN_DOVECOT_LMTP_PORT: String(env.lmtp.port),
  };
}
