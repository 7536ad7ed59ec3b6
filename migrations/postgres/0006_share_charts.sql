-- 0006_share_charts: the picture a chat app shows when a share link
-- unfurls (og:image), drawn once when the snapshot is taken and kept with
-- it, so it shows what the snapshot shows. NULL: nothing to draw (a trace).
ALTER TABLE share_links ADD COLUMN chart_png bytea;
