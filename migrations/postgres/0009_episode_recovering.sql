-- 0009_episode_recovering: an open episode whose newest minutes are healthy
-- keeps the minute after its last anomalous one. It stays open for a few
-- quiet minutes against flapping; the pages say "recovering since" rather
-- than only "ongoing". NULL while the newest minute is anomalous and once
-- the episode has ended.
ALTER TABLE episodes ADD COLUMN recovering_since timestamptz;
