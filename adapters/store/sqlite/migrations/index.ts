// Every migration, in order. A migration is never edited once released: add the next one.
import directory from './001_directory.ts';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export const migrations: Migration[] = [{ version: 1, name: 'directory', sql: directory }];
