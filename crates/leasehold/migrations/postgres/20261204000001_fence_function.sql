-- The fenced write as a function any client can call, so that a writer outside Rust (psql, psycopg,
-- SQLAlchemy, a Go service) checks a fence the way `fence::check` does, in its own transaction:
--
--     SELECT leasehold_fence('ledger:acct-1', 42);
--
-- It stores the presented fence unless the resource already accepted a newer one, and holds the
-- resource's row lock until the transaction ends (writers of one resource run one after another, so a
-- read-modify-write after it is safe). Accepted: it returns the fence. Refused: it raises SQLSTATE
-- LHF01 with a message naming both fences, which aborts the transaction: nothing of that writer can
-- commit. Bad arguments (an empty or over-long name, a negative or NULL fence) raise SQLSTATE 22023.
-- The same fence again is accepted (one holder writing twice). `leasehold_fences` is found through
-- the caller's search_path, as leasehold's own statements find it.
CREATE OR REPLACE FUNCTION leasehold_fence(resource TEXT, fence BIGINT) RETURNS BIGINT
LANGUAGE plpgsql VOLATILE AS $leasehold$
DECLARE
    stored BIGINT;
BEGIN
    IF resource IS NULL OR resource = '' OR octet_length(resource) > 255 THEN
        RAISE EXCEPTION 'leasehold: the fenced resource name must be 1 to 255 bytes (got %)',
            coalesce(octet_length(resource)::text || ' bytes', 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF fence IS NULL OR fence < 0 THEN
        RAISE EXCEPTION 'leasehold: the fence for % must be a number 0 or above (got %); pass the lease''s fence (LEASEHOLD_FENCE)',
            resource, coalesce(fence::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    -- The same upsert as the Rust guard: on conflict the row is locked whether or not it is updated.
    INSERT INTO leasehold_fences AS f (resource, fence) VALUES (leasehold_fence.resource, leasehold_fence.fence)
    ON CONFLICT ON CONSTRAINT leasehold_fences_pkey DO UPDATE SET fence = excluded.fence
        WHERE f.fence <= excluded.fence
    RETURNING f.fence INTO stored;
    IF stored IS NULL THEN
        -- Refused: the row exists with a newer fence, and this transaction holds its lock.
        SELECT f.fence INTO stored FROM leasehold_fences AS f WHERE f.resource = leasehold_fence.resource;
        RAISE EXCEPTION 'leasehold: stale fence for %: presented %, the resource already accepted %; this writer''s lease was superseded, roll back',
            resource, fence, stored
            USING ERRCODE = 'LHF01',
                  DETAIL = format('presented=%s current=%s', fence, stored);
    END IF;
    RETURN stored;
END
$leasehold$;
