// The drizzle schema of js/orm/drizzle.test.mjs (drizzle-kit reads it too).
import { sql } from 'drizzle-orm';
import { pgSequence, pgTable, bigint, text } from 'drizzle-orm/pg-core';

export const photosIdSeq = pgSequence('drizzle_photos_id_seq');
export const photos = pgTable('drizzle_photos', {
  id: bigint('id', { mode: 'bigint' }).primaryKey().default(sql`next_shard_id('drizzle_photos_id_seq', 8)`),
  note: text('note').notNull(),
});
