-- The end of a function that grants (functions.sql): it notifies the
-- waiters it granted in its commit (p_notify) and returns their payloads.
IF p_notify AND cardinality(v_woke) > 0 THEN
    PERFORM pg_notify({{wake_channel(p_key)}}, x) FROM unnest(v_woke) AS x;
  END IF;
  RETURN v_woke;
