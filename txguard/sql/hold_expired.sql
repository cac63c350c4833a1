-- The expiry check of every hold function (functions.sql, hold_one.sql),
-- inserted by the sql call.
  IF h."expires_at_ms" <= h."now_ms" THEN
    RAISE EXCEPTION USING ERRCODE = 'SG001',
      MESSAGE = format('syncguard: lease not held: expired %s ms ago by the server''s clock', h."now_ms" - h."expires_at_ms"),
      HINT = 'roll the transaction back: its writes must not commit';
  END IF;
