-- The read-write lock's operations, as SQL functions: each is one
-- statement (SELECT * FROM fn(...)), one round trip and one transaction.
-- Every function that changes a key's holders or queue first locks the
-- key's row in {{keys}} (created at 0 if new): a shared operation (a
-- reader's attempt, a reader's release) FOR SHARE, an exclusive one (a
-- writer's attempt or release, a waiter leaving, the hand-off) FOR
-- UPDATE. Shared operations run side by side and change only their own
-- rows (their lease, their queue place): they read liveness and never
-- delete another's dead row (that is left to exclusive operations, which
-- run alone on the key). Under READ COMMITTED each later query of the
-- function reads a fresh snapshot that includes every commit before the
-- lock was granted. A lock is never upgraded within a transaction (two
-- upgraders would deadlock). A function refuses to run under another
-- isolation level (SQLSTATE 40001): the client runs it again in a READ
-- COMMITTED transaction. Extends do not lock the key row: they update
-- their own row only while it is live, and a reader of the row that
-- deletes it as dead re-checks that under the row lock.
-- a: in a lookup of {{holders}} or {{waiters}} by key, the key (and lockId) it compares, MATERIALIZED: no value for the planner, the session's cached generic plan serves ("Planning" in docs/design.md).
--
-- {{grant_fn}}(key, now, notify): the hand-off. With no live writer, the
-- run of readers at the head of the queue (up to the first waiting writer)
-- is admitted; with no live holder at all and a writer at the head, that
-- writer is (the key's writer fence incremented). Every reader of the run
-- is admitted, polling or notified (its next attempt finds its lease, and
-- the run is admitted in one commit whoever listens); a writer only when
-- a notification reaches it (notified): one that polls takes the key at
-- its own next attempt (nobody behind a waiting writer may take it
-- meanwhile). The granted waiters leave the queue and are notified
-- (payload: a hash of the lockId) in this commit: a hint, also to a reader
-- whose LISTEN took effect since its row was written. Returns their
-- payloads.
-- The caller holds the key row's lock FOR UPDATE and has deleted dead
-- holders.
CREATE OR REPLACE FUNCTION {{grant_fn}}(p_key text, p_now bigint, p_notify boolean)
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_any boolean;
  v_fence bigint;
  v_woke text[] := '{}';
  w record;
BEGIN
  IF EXISTS (WITH a AS MATERIALIZED (SELECT p_key AS "key")
             SELECT 1 FROM {{holders}} AS h WHERE h."key" = (SELECT a."key" FROM a) AND h."exclusive") THEN
    RETURN v_woke;
  END IF;
  v_any := EXISTS (WITH a AS MATERIALIZED (SELECT p_key AS "key")
                   SELECT 1 FROM {{holders}} AS h WHERE h."key" = (SELECT a."key" FROM a));
  FOR w IN WITH a AS MATERIALIZED (SELECT p_key AS "key")
           SELECT q.* FROM {{waiters}} AS q
           WHERE q."key" = (SELECT a."key" FROM a) AND q."deadline_ms" > p_now AND q."ttl_ms" <> 0
           ORDER BY q."place", q."lock_id" LOOP
    IF w."exclusive" THEN
      IF NOT v_any AND w."notified" THEN
        UPDATE {{keys}} AS k SET "fence" = k."fence" + 1
        WHERE k."key" = p_key AND k."fence" < {{fence_max}} RETURNING k."fence" INTO v_fence;
        IF FOUND THEN
          INSERT INTO {{holders}} ("key", "lock_id", "exclusive", "expires_at_ms", "acquired_at_ms", "fence", "user_key", "identity")
          VALUES (p_key, w."lock_id", true, p_now + w."ttl_ms", p_now, v_fence, w."user_key", w."identity")
          ON CONFLICT ("lock_id") DO NOTHING;
          DELETE FROM {{waiters}} AS q WHERE q."lock_id" = w."lock_id";
          v_woke := v_woke || {{wake_payload(w."lock_id")}};
        END IF;
      END IF;
      EXIT; -- a waiting writer ends the run: nobody behind it is admitted
    END IF;
    SELECT k."fence" INTO v_fence FROM {{keys}} AS k WHERE k."key" = p_key;
    INSERT INTO {{holders}} ("key", "lock_id", "exclusive", "expires_at_ms", "acquired_at_ms", "fence", "user_key", "identity")
    VALUES (p_key, w."lock_id", false, p_now + w."ttl_ms", p_now, v_fence, w."user_key", w."identity")
    ON CONFLICT ("lock_id") DO NOTHING;
    DELETE FROM {{waiters}} AS q WHERE q."lock_id" = w."lock_id";
    v_woke := v_woke || {{wake_payload(w."lock_id")}};
    v_any := true;
  END LOOP;
  {{sql(notify_woke.sql)}}
END
$fn$;

-- {{lock_fn}}(key, user_key, mode): creates the key's row if new and
-- locks it: mode 'share' FOR SHARE; 'update' FOR UPDATE; 'try' FOR UPDATE
-- if no one else holds the row locked now, else FOR SHARE (never both: a
-- lock is not upgraded). PostgreSQL lets a FOR SHARE request pass a FOR
-- UPDATE request that waits behind other FOR SHARE holders, so a stream
-- of readers' statements can hold a blocking FOR UPDATE off for long: a
-- writer's first queued attempt asks with 'try' and, under FOR SHARE, only
-- queues (its place then turns later readers away, and queued readers
-- renew their places without the lock, so the stream ends). Returns the
-- server's clock read after the lock was granted, and whether the lock is
-- FOR UPDATE; then dead holders of the key and waiters dead for
-- {{waiter_gc}} ms are deleted (shared operations filter by liveness
-- instead).
DROP FUNCTION IF EXISTS {{lock_fn}}(text, text);

DROP FUNCTION IF EXISTS {{lock_fn}}(text, text, boolean);

CREATE OR REPLACE FUNCTION {{lock_fn}}(p_key text, p_user_key text, p_mode text, OUT o_now bigint, OUT o_exclusive boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'syncguard rwlock: the functions need READ COMMITTED (got %)', current_setting('transaction_isolation')
      USING ERRCODE = '40001';
  END IF;
  o_exclusive := p_mode <> 'share';
  INSERT INTO {{keys}} ("key", "fence", "key_debug") VALUES (p_key, 0, p_user_key) ON CONFLICT ("key") DO NOTHING;
  IF p_mode = 'try' THEN
    PERFORM 1 FROM {{keys}} AS k WHERE k."key" = p_key FOR UPDATE SKIP LOCKED;
    o_exclusive := FOUND;
  ELSIF p_mode = 'update' THEN
    PERFORM 1 FROM {{keys}} AS k WHERE k."key" = p_key FOR UPDATE;
  END IF;
  IF NOT o_exclusive THEN
    PERFORM 1 FROM {{keys}} AS k WHERE k."key" = p_key FOR SHARE;
  END IF;
  o_now := {{now_ms}};
  IF o_exclusive THEN
    WITH a AS MATERIALIZED (SELECT p_key AS "key")
    DELETE FROM {{holders}} AS h WHERE h."key" = (SELECT a."key" FROM a) AND NOT ({{live(h, o_now)}});
    WITH a AS MATERIALIZED (SELECT p_key AS "key")
    DELETE FROM {{waiters}} AS q WHERE q."key" = (SELECT a."key" FROM a) AND q."deadline_ms" < o_now - {{waiter_gc}};
  END IF;
END
$fn$;

-- {{hint_fn}}(key, lock_id, now, notify): what a release under a shared
-- lock does instead of the hand-off: it hints the head of the queue. A
-- notified writer first in the queue is notified when no other live lease
-- of the key is left that no concurrent release is deleting (FOR KEY
-- SHARE SKIP LOCKED: a row being deleted is locked; the lease it finds,
-- now locked, can be released only after this commit, and that release
-- looks again; of releases side by side at least the last to lock holds
-- no other's row and notifies). A run of notified readers first in the
-- queue is notified when no writer's lease is live. The waiters' own
-- attempts decide. Returns the payloads.
CREATE OR REPLACE FUNCTION {{hint_fn}}(p_key text, p_lock_id text, p_now bigint, p_notify boolean)
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  v_woke text[] := '{}';
  v_other text;
  w record;
BEGIN
  FOR w IN WITH a AS MATERIALIZED (SELECT p_key AS "key")
           SELECT q."lock_id", q."exclusive", q."notified" FROM {{waiters}} AS q
           WHERE q."key" = (SELECT a."key" FROM a) AND q."deadline_ms" > p_now AND q."ttl_ms" <> 0
           ORDER BY q."place", q."lock_id" LOOP
    IF w."exclusive" THEN
      IF cardinality(v_woke) = 0 AND w."notified" THEN
        WITH a AS MATERIALIZED (SELECT p_key AS "key", p_lock_id AS "lock_id")
        SELECT h."lock_id" INTO v_other FROM {{holders}} AS h
        WHERE h."key" = (SELECT a."key" FROM a) AND h."lock_id" <> (SELECT a."lock_id" FROM a) AND {{live(h, p_now)}}
        LIMIT 1 FOR KEY SHARE OF h SKIP LOCKED;
        IF NOT FOUND THEN
          v_woke := ARRAY[{{wake_payload(w."lock_id")}}];
        END IF;
      END IF;
      EXIT;
    END IF;
    IF cardinality(v_woke) = 0 AND EXISTS (WITH a AS MATERIALIZED (SELECT p_key AS "key")
        SELECT 1 FROM {{holders}} AS h WHERE h."key" = (SELECT a."key" FROM a) AND h."exclusive" AND {{live(h, p_now)}}) THEN
      EXIT;
    END IF;
    IF w."notified" THEN
      v_woke := v_woke || {{wake_payload(w."lock_id")}};
    END IF;
  END LOOP;
  {{sql(notify_woke.sql)}}
END
$fn$;

-- {{acquire_fn}}: one attempt for a shared (p_exclusive false) or exclusive
-- lease of p_key (storage key) for p_ttl_ms. p_window_ms NULL: a plain
-- attempt, placed after every live waiter, that never queues. Otherwise
-- the attempt of a waiter whose lockId p_lock_id is the same for all its
-- attempts: it keeps its place (server µs at its first attempt), and when
-- not admitted queues or renews its row, live for p_window_ms more, with
-- p_notified (whether a notification reaches it now).
-- Admission: a writer when no lease is live and no live waiter is ahead
-- of it; a reader when no writer's lease is live and no live writer waits
-- ahead of it (FIFO: a queued writer blocks later readers). A lockId that
-- already holds a live lease (a re-run after a lost connection, or a
-- hand-off to this waiter) reports that lease again.
-- A reader's attempt locks the key row FOR SHARE: readers' attempts and
-- releases run side by side, each writing only its own rows (its lease,
-- its queue place); a writer's lock of the row (FOR UPDATE) waits for them
-- and they for it, so a writer's admission and a reader's admission never
-- overlap, and each sees the other's commit. A writer's attempt locks it
-- FOR UPDATE and runs the hand-off ({{grant_fn}}) in the same commit: a
-- key freed by an expiry goes to the head of the queue. (Readers queued
-- behind an expired writer's lease find the key at their own attempt,
-- which its expiry cues: retry_at_ms.) A writer's first queued attempt
-- that finds the row locked by readers' statements ('try') only queues
-- under FOR SHARE, which turns later readers away once committed (its
-- later attempts wait for FOR UPDATE); it then looks, as a release's hint does, for a
-- live lease that no concurrent release is deleting: one found (and
-- locked) is released after this commit and that release sees the queued
-- writer and hints it; with none, "again": the writer attempts again at
-- once (its place queued, nothing left to wait for but statements in
-- flight).
-- A queued reader that a writer blocks renews its place (or, behind a
-- queued writer, queues) without the key row's lock: its own row only;
-- so while a writer waits, the only statements on the key row FOR SHARE
-- are the releases of the readers it waits for.
-- retry_at_ms: the expiry of the latest live lease that blocks the
-- attempt (NULL: none; a waiter ahead blocks it). again: see above.
DROP FUNCTION IF EXISTS {{acquire_fn}}(text, text, text, boolean, bigint, bigint, boolean, text, boolean);

CREATE OR REPLACE FUNCTION {{acquire_fn}}(p_key text, p_lock_id text, p_user_key text, p_exclusive boolean,
  p_ttl_ms bigint, p_window_ms bigint, p_notified boolean, p_identity text, p_notify boolean)
RETURNS TABLE ("ok" boolean, "fence" bigint, "expires_at_ms" bigint, "acquired_at_ms" bigint, "now_ms" bigint,
  "retry_at_ms" bigint, "exhausted" boolean, "woke" text, "again" boolean)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
  v_now bigint;
  v_excl boolean;
  v_other text;
  v_place bigint;
  v_me record;
  v_h record;
  v_ok boolean;
  v_fence bigint;
  v_retry bigint;
  v_woke text[] := '{}';
  v_lockfree boolean := false;
BEGIN
  SELECT q.* INTO v_me FROM {{waiters}} AS q WHERE q."lock_id" = p_lock_id;
  IF NOT p_exclusive AND p_window_ms IS NOT NULL
      AND (v_me."lock_id" IS NULL OR v_me."ttl_ms" <> 0 AND (v_me."notified" OR NOT p_notified)) THEN
    v_lockfree := NOT EXISTS (SELECT 1 FROM {{holders}} AS h WHERE h."lock_id" = p_lock_id);
  END IF;
  IF v_lockfree THEN
    -- a queued reader that a writer blocks, without the key row's lock:
    -- its own queue row only. Renewing: a writer holds, or waits ahead.
    -- Queueing: a writer waits ahead (a writer that holds hands the key to
    -- the readers queued when it releases, under FOR UPDATE: a reader
    -- queues under the lock then). A hand-off that deletes the row
    -- meanwhile makes the UPDATE find none: the locked path finds the
    -- lease. A waiter that notifications now reach and did not before
    -- renews under the lock (a hand-off beside it would pass it over as
    -- polling, and it would not poll any more).
    v_now := {{now_ms}};
    v_place := COALESCE(v_me."place", floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    -- (the locked path's lookup of the writer's lease, written apart: one
    -- statement text per cached plan)
    WITH a AS MATERIALIZED (SELECT p_key AS "key")
    SELECT max(h."expires_at_ms") INTO v_retry FROM {{holders}} AS h
    WHERE h."key" = (SELECT a."key" FROM a) AND {{live(h, v_now)}} AND h."exclusive";
    IF (v_retry IS NOT NULL AND v_me."lock_id" IS NOT NULL) OR EXISTS (
        WITH a AS MATERIALIZED (SELECT p_key AS "key", p_lock_id AS "lock_id")
        SELECT 1 FROM {{waiters}} AS q
        WHERE q."key" = (SELECT a."key" FROM a) AND q."lock_id" <> (SELECT a."lock_id" FROM a) AND q."deadline_ms" > v_now
          AND q."ttl_ms" <> 0 AND q."exclusive" AND (q."place", q."lock_id") < (v_place, (SELECT a."lock_id" FROM a))) THEN
      IF v_me."lock_id" IS NULL THEN
        INSERT INTO {{waiters}} ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "exclusive", "user_key", "notified", "identity")
        VALUES (p_key, p_lock_id, v_place, v_now + p_window_ms, p_ttl_ms, false, p_user_key, p_notified, p_identity)
        ON CONFLICT ("lock_id") DO NOTHING;
      ELSE
        UPDATE {{waiters}} AS q SET "deadline_ms" = v_now + p_window_ms, "ttl_ms" = p_ttl_ms, "notified" = p_notified
        WHERE q."lock_id" = p_lock_id AND q."ttl_ms" <> 0;
      END IF;
      IF FOUND THEN
        RETURN QUERY SELECT false, NULL::bigint, NULL::bigint, NULL::bigint, v_now, v_retry, false, NULL::text, false;
        RETURN;
      END IF;
    END IF;
  END IF;
  SELECT l.o_now, l.o_exclusive INTO v_now, v_excl
  FROM {{lock_fn}}(p_key, p_user_key, CASE WHEN NOT p_exclusive THEN 'share'
    WHEN p_window_ms IS NULL OR v_me."lock_id" IS NOT NULL THEN 'update' ELSE 'try' END) AS l;
  SELECT h.* INTO v_h FROM {{holders}} AS h WHERE h."lock_id" = p_lock_id AND h."key" = p_key;
  IF FOUND AND {{live(v_h, v_now)}} THEN
    DELETE FROM {{waiters}} AS q WHERE q."lock_id" = p_lock_id;
    RETURN QUERY SELECT true, v_h."fence", v_h."expires_at_ms", v_h."acquired_at_ms", v_now, NULL::bigint, false, NULL::text, false;
    RETURN;
  ELSIF FOUND THEN
    -- its own lease, dead (under a shared lock: an exclusive one deleted it)
    DELETE FROM {{holders}} AS h WHERE h."lock_id" = p_lock_id AND NOT ({{live(h, v_now)}});
  END IF;
  -- read again under the lock (written apart from the first read: one
  -- statement text per cached plan)
  SELECT w.* INTO v_me FROM {{waiters}} AS w WHERE w."lock_id" = p_lock_id;
  IF FOUND AND v_me."ttl_ms" = 0 THEN
    -- a tombstone: this waiter gave up; a late attempt of its takes nothing
    RETURN QUERY SELECT false, NULL::bigint, NULL::bigint, NULL::bigint, v_now, NULL::bigint, false, NULL::text, false;
    RETURN;
  END IF;
  v_place := COALESCE(v_me."place", floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
  IF p_exclusive AND NOT v_excl THEN
    -- a queued writer under a shared lock: queue or renew, never admitted
    INSERT INTO {{waiters}} AS q ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "exclusive", "user_key", "notified", "identity")
    VALUES (p_key, p_lock_id, v_place, v_now + p_window_ms, p_ttl_ms, true, p_user_key, p_notified, p_identity)
    {{sql(waiter_renew.sql)}}
    WITH a AS MATERIALIZED (SELECT p_key AS "key")
    SELECT max(h."expires_at_ms") INTO v_retry FROM {{holders}} AS h WHERE h."key" = (SELECT a."key" FROM a) AND {{live(h, v_now)}};
    WITH a AS MATERIALIZED (SELECT p_key AS "key")
    SELECT h."lock_id" INTO v_other FROM {{holders}} AS h
    WHERE h."key" = (SELECT a."key" FROM a) AND {{live(h, v_now)}}
    LIMIT 1 FOR KEY SHARE OF h SKIP LOCKED;
    v_ok := NOT FOUND; -- again: no lease left to wait for
    RETURN QUERY SELECT false, NULL::bigint, NULL::bigint, NULL::bigint, v_now, v_retry, false, NULL::text, v_ok;
    RETURN;
  END IF;
  IF p_exclusive THEN
    WITH a AS MATERIALIZED (SELECT p_key AS "key")
    SELECT max(h."expires_at_ms") INTO v_retry FROM {{holders}} AS h WHERE h."key" = (SELECT a."key" FROM a);
    v_ok := v_retry IS NULL AND NOT EXISTS (
      WITH a AS MATERIALIZED (SELECT p_key AS "key", p_lock_id AS "lock_id")
      SELECT 1 FROM {{waiters}} AS q
      WHERE q."key" = (SELECT a."key" FROM a) AND q."lock_id" <> (SELECT a."lock_id" FROM a) AND q."deadline_ms" > v_now
        AND q."ttl_ms" <> 0 AND (q."place", q."lock_id") < (v_place, (SELECT a."lock_id" FROM a)));
  ELSE
    WITH a AS MATERIALIZED (SELECT p_key AS "key")
    SELECT max(h."expires_at_ms") INTO v_retry FROM {{holders}} AS h
    WHERE h."key" = (SELECT a."key" FROM a) AND h."exclusive" AND {{live(h, v_now)}};
    v_ok := v_retry IS NULL AND NOT EXISTS (
      WITH a AS MATERIALIZED (SELECT p_key AS "key", p_lock_id AS "lock_id")
      SELECT 1 FROM {{waiters}} AS q
      WHERE q."key" = (SELECT a."key" FROM a) AND q."lock_id" <> (SELECT a."lock_id" FROM a) AND q."deadline_ms" > v_now
        AND q."ttl_ms" <> 0 AND q."exclusive" AND (q."place", q."lock_id") < (v_place, (SELECT a."lock_id" FROM a)));
  END IF;
  IF v_ok THEN
    IF p_exclusive THEN
      UPDATE {{keys}} AS k SET "fence" = k."fence" + 1
      WHERE k."key" = p_key AND k."fence" < {{fence_max}} RETURNING k."fence" INTO v_fence;
      IF NOT FOUND THEN
        RETURN QUERY SELECT false, NULL::bigint, NULL::bigint, NULL::bigint, v_now, NULL::bigint, true, NULL::text, false;
        RETURN;
      END IF;
    ELSE
      -- a writer's lease no longer live goes first, under its row lock: a
      -- transaction that checked it (txguard, FOR KEY SHARE) ends before a
      -- reader takes over (readers delete no other dead row)
      WITH a AS MATERIALIZED (SELECT p_key AS "key")
      DELETE FROM {{holders}} AS h WHERE h."key" = (SELECT a."key" FROM a) AND h."exclusive" AND NOT ({{live(h, v_now)}});
      SELECT k."fence" INTO v_fence FROM {{keys}} AS k WHERE k."key" = p_key;
      -- the lease is stamped now, not when the key row's lock was granted:
      -- a writer releases beside readers (FOR SHARE), so the snapshot that
      -- found no live writer may include a release that committed after
      -- that grant; the reader's lease starts after what it saw end
      v_now := {{now_ms}};
    END IF;
    INSERT INTO {{holders}} ("key", "lock_id", "exclusive", "expires_at_ms", "acquired_at_ms", "fence", "user_key", "identity")
    VALUES (p_key, p_lock_id, p_exclusive, v_now + p_ttl_ms, v_now, v_fence, p_user_key, p_identity);
    IF v_me."lock_id" IS NOT NULL THEN
      DELETE FROM {{waiters}} AS q WHERE q."lock_id" = p_lock_id;
    END IF;
  ELSIF p_window_ms IS NOT NULL THEN
    INSERT INTO {{waiters}} AS q ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "exclusive", "user_key", "notified", "identity")
    VALUES (p_key, p_lock_id, v_place, v_now + p_window_ms, p_ttl_ms, p_exclusive, p_user_key, p_notified, p_identity)
    {{sql(waiter_renew.sql)}}
  END IF;
  IF p_exclusive THEN
    v_woke := {{grant_fn}}(p_key, v_now, p_notify);
  END IF;
  RETURN QUERY SELECT v_ok, v_fence, CASE WHEN v_ok THEN v_now + p_ttl_ms END, CASE WHEN v_ok THEN v_now END, v_now,
    CASE WHEN v_ok THEN NULL ELSE v_retry END, false, array_to_string(v_woke, ','), false;
END
$fn$;

-- {{release_fn}}(lock_id, wkey, notify): deletes the lease of p_lock_id if
-- it is live. seen_expires_at_ms: the expiry of a row of p_lock_id that
-- was not live (to tell "expired" from "not-found"). woke: the payloads of
-- the waiters granted or hinted, notified on woke_channel.
-- A writer's release, or a waiter giving up (p_wkey: its storage key),
-- locks the key row FOR UPDATE and hands what it frees on in the same
-- commit ({{grant_fn}}): a leaving writer may free readers queued behind
-- it. The waiter's queue row becomes a tombstone (ttl 0, dead): it runs
-- after or before each attempt of its own (never beside one, FOR UPDATE),
-- so an attempt of its still in flight takes nothing, and a lease handed
-- to it meanwhile is released.
-- A reader's release locks the key row FOR SHARE, beside other readers'
-- attempts and releases, deletes its own row only, and hints the head of
-- the queue ({{hint_fn}}): it cannot hand the key on (that needs FOR
-- UPDATE), nor know for sure that it is the last reader (two releases
-- side by side each still see the other's row). The waiter it hints takes
-- the key at its own attempt. A waiter no notification reaches polls; an
-- expiry is cued by retry_at_ms.
CREATE OR REPLACE FUNCTION {{release_fn}}(p_lock_id text, p_wkey text, p_notify boolean)
RETURNS TABLE ("released" boolean, "seen_expires_at_ms" bigint, "now_ms" bigint, "woke" text, "woke_channel" text)
LANGUAGE plpgsql VOLATILE AS $fn$
#variable_conflict use_column
DECLARE
  v_key text := p_wkey;
  v_excl boolean := true;
  v_now bigint;
  v_seen bigint;
  v_row record;
  v_done boolean := false;
  v_woke text[] := '{}';
BEGIN
  IF v_key IS NULL THEN
    SELECT h."key", h."expires_at_ms", h."exclusive" INTO v_key, v_seen, v_excl FROM {{holders}} AS h WHERE h."lock_id" = p_lock_id;
    IF v_key IS NULL THEN
      RETURN QUERY SELECT false, NULL::bigint, {{now_ms}}, NULL::text, NULL::text;
      RETURN;
    END IF;
  END IF;
  SELECT l.o_now, l.o_exclusive INTO v_now, v_excl FROM {{lock_fn}}(v_key, '',
    CASE WHEN p_wkey IS NOT NULL THEN 'update' WHEN v_excl THEN 'try' ELSE 'share' END) AS l;
  DELETE FROM {{holders}} AS h WHERE h."lock_id" = p_lock_id AND h."key" = v_key RETURNING h.* INTO v_row;
  IF FOUND THEN
    v_done := {{live(v_row, v_now)}}; -- (under FOR UPDATE, dead ones are gone)
    v_seen := v_row."expires_at_ms";
  END IF;
  IF p_wkey IS NOT NULL THEN
    INSERT INTO {{waiters}} AS q ("key", "lock_id", "place", "deadline_ms", "ttl_ms", "exclusive", "user_key", "notified")
    VALUES (p_wkey, p_lock_id, 0, v_now - 1, 0, false, '', false)
    ON CONFLICT ("lock_id") DO UPDATE SET "deadline_ms" = EXCLUDED."deadline_ms", "ttl_ms" = 0;
  END IF;
  IF v_excl THEN
    v_woke := {{grant_fn}}(v_key, v_now, p_notify);
  ELSE
    v_woke := {{hint_fn}}(v_key, p_lock_id, v_now, p_notify);
  END IF;
  RETURN QUERY SELECT v_done, CASE WHEN v_done THEN NULL ELSE v_seen END, v_now, array_to_string(v_woke, ','),
    {{wake_channel(v_key)}};
END
$fn$;
