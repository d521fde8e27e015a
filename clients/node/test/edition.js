// The edition the suite runs against: the managed edition when IDEM_EDITION=managed (the
// managed suite, test/managed/run.sh, runs this suite against it), the extension otherwise.
// A test of what only the extension has takes extensionOnly(reason) as its options: against
// the managed edition it is not run, and node --test reports it as a skip whose reason begins
// 'not applicable to the managed edition: ' (the managed suite counts those apart, never as
// passed). Each reason is a row of docs/managed.md's feature table.
export const EDITION = process.env.IDEM_EDITION || 'extension';
export const MANAGED = EDITION === 'managed';
export const NOT_APPLICABLE = 'not applicable to the managed edition: ';

export function extensionOnly(reason) {
  return MANAGED ? { skip: NOT_APPLICABLE + reason } : {};
}

// The reasons, one per row of the feature table, so that each test names the same words.
export const REASONS = Object.freeze({
  reserveBegin: 'reserve_begin (a transaction opened by the call): the edition has none',
  outbox: 'emit, the idempotency output plugin and lsn_key: the edition has none',
  versions: 'versions: the edition starts at 0.3.0, there is no 0.2.0 to install',
  repeatableRead: 'REPEATABLE READ / SERIALIZABLE callers: the edition refuses them (0A000) ' +
    'in calls that write keys',
});
