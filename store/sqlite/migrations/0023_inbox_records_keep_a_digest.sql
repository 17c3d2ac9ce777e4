-- An inbox's de-duplication record keeps a digest of its message's
-- content (store.InboxDigest: type and payload): a message id received
-- again was dropped as a duplicate whatever it carried, and a source that
-- reused an id for another message lost that message silently. Receive
-- now refuses an id whose record has another digest (store.ErrIDReused;
-- TestIDReusedWithAnotherContentIsRefusedAndKept). Records written before
-- this version keep no digest and are taken as duplicates as before.
ALTER TABLE {{prefix}}inbox_received ADD COLUMN digest BLOB;
