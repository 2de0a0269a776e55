-- The fenced write as a procedure any client can call, so that a writer outside Rust (the mysql
-- client, PyMySQL, SQLAlchemy, a Go service) checks a fence the way `fence::check` does, in its own
-- transaction:
--
--     CALL leasehold_fence('ledger:acct-1', 42);
--
-- It stores the presented fence unless the resource already accepted a newer one, and holds the
-- resource's row lock until the transaction ends. Accepted: it returns no rows. Refused: it raises
-- SQLSTATE LHF01 (error code 1644, ER_SIGNAL_EXCEPTION) with a message naming both fences. Unlike
-- PostgreSQL, an error here undoes only the statement, not the transaction: the caller must roll
-- back (every driver's transaction block does on an exception). Bad arguments (an empty name, a
-- negative or NULL fence) raise SQLSTATE 22023. A procedure rather than a function: with binary
-- logging on (MySQL's default) a function that writes needs SUPER or log_bin_trust_function_creators.
-- DDL commits implicitly, so this file is safe to run again (dropped and created).
DROP PROCEDURE IF EXISTS leasehold_fence;
CREATE PROCEDURE leasehold_fence(
    IN p_resource VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_fence BIGINT)
    MODIFIES SQL DATA
BEGIN
    DECLARE stored BIGINT DEFAULT NULL;
    DECLARE message VARCHAR(512);
    IF p_resource IS NULL OR p_resource = '' THEN
        SIGNAL SQLSTATE '22023'
            SET MESSAGE_TEXT = 'leasehold: the fenced resource name must be 1 to 255 bytes (got an empty one)';
    END IF;
    IF p_fence IS NULL OR p_fence < 0 THEN
        SET message = CONCAT('leasehold: the fence for ', p_resource, ' must be a number 0 or above (got ',
            COALESCE(p_fence, 'NULL'), '); pass the lease''s fence (LEASEHOLD_FENCE)');
        SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = message;
    END IF;
    -- The same two statements as the Rust guard: keep the larger fence (locking the row), then a
    -- locking read, which sees the last committed row at any isolation level.
    INSERT INTO leasehold_fences (resource, fence) VALUES (p_resource, p_fence)
        ON DUPLICATE KEY UPDATE fence = GREATEST(fence, VALUES(fence));
    SELECT fence INTO stored FROM leasehold_fences WHERE resource = p_resource FOR UPDATE;
    IF stored <> p_fence THEN
        SET message = CONCAT('leasehold: stale fence for ', p_resource, ': presented ', p_fence,
            ', the resource already accepted ', stored, '; this writer''s lease was superseded, roll back');
        SIGNAL SQLSTATE 'LHF01' SET MESSAGE_TEXT = message;
    END IF;
END;
