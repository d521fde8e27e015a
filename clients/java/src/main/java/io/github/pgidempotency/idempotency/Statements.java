package io.github.pgidempotency.idempotency;

/**
 * The texts of every statement the client sends: those of test/vectors/statements.json
 * (RESERVE, ..., and LISTED) in SpecStatements, generated from it by scripts/gen_spec.py, and
 * transaction control here. Every value is a bound parameter; no value is ever written into a
 * text.
 */
final class Statements extends SpecStatements {
  private Statements() {}

  /** Transaction control. */
  static final String COMMIT = "COMMIT";

  static final String ROLLBACK = "ROLLBACK";

  /**
   * A statement followed by COMMIT in one text: pgjdbc sends the statements of one prepared
   * text as a Parse, Bind and Execute each and one Sync, in one round trip, with the values
   * bound; after a failed statement the server skips the COMMIT.
   */
  static String thenCommit(String statement) {
    return statement + "; " + COMMIT;
  }
}
