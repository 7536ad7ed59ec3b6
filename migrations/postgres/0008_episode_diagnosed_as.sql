-- 0008_episode_diagnosed_as: the service whose diagnosis an episode carries.
-- An inference server that served exactly one app's requests is that app's
-- requests seen from the other side; its episodes carry the app's diagnosis
-- (diagnosed once, with the app's SLO) so the two never contradict. ''
-- means the episode's own service.
ALTER TABLE episodes ADD COLUMN diagnosed_as text NOT NULL DEFAULT '';
