-- 0004_shares: a share link gets an id that is not its token, so the list
-- page can revoke a link without knowing the token (only its hash is
-- stored), and so no page ever has to print a token twice.
ALTER TABLE share_links ADD COLUMN id bigserial;
ALTER TABLE share_links ADD CONSTRAINT share_links_id_key UNIQUE (id);
