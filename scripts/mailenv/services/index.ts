// Every service of the environment, in start order.
import { dovecot } from './dovecot.ts';
import { postfix } from './postfix.ts';
import { postgres } from './postgres.ts';
import { redis } from './redis.ts';
import { sink } from './sink.ts';

export const SERVICES = [dovecot, postfix, sink, redis, postgres] as const;

export type ServiceName = (typeof SERVICES)[number]['name'];
export type { PrepareContext, Service } from './service.ts';
