// The base class of every error of the client (errors.js), and the maker of the classes of one
// SQLSTATE the generated spec.js defines on it.

export class IdempotencyError extends Error {
  // code: the SQLSTATE (the server's, or ours for errors raised in the client); detail and
  // hint: the server's; cause: the pg error, if any.
  constructor(message, { code, detail, hint, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    if (code !== undefined) this.code = code;
    else if (new.target.sqlstate !== undefined) this.code = new.target.sqlstate;
    this.detail = detail;
    this.hint = hint;
  }
}

export function sqlstateError(name, sqlstate, description) {
  const cls = {
    [name]: class extends IdempotencyError {},
  }[name];
  cls.sqlstate = sqlstate;
  cls.description = description;
  return cls;
}
