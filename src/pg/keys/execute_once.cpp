// execute_once: a key's claim, its work and its answer in one call. On a new key it runs one
// statement (the work) with bound parameters, in the caller's transaction and with the caller's
// privileges and search_path, stores the statement's result as the response and completes the
// key; any other outcome is reserve's, and runs nothing. Outside a transaction block that is
// one autocommit round trip: claim, work and answer commit together or not at all.
//
// A statement text is parsed, its parameter types inferred (as for a protocol-level Parse
// without types) and prepared once per backend, then kept (SPI_keepplan) in a small cache
// keyed by the text, least recently used out. PostgreSQL's plan cache revalidates a kept plan
// after DDL on what it uses and when search_path changes.
//
// The code between SPI_connect and SPI_finish is C-style: no C++ object lives there, so
// PostgreSQL's errors (the statement's own included) may pass through it.

#include "pg/guard.hpp"
#include "pg/keys/key_lifecycle.hpp"
#include "pg/spi.hpp"
#include "pg/sql_errors.hpp"
#include "pg/storage/key_store.hpp"

#include "core/key_rules.hpp"
#include "core/statement_rules.hpp"

extern "C" {
#include "nodes/parsenodes.h"
#include "parser/analyze.h"
#include "tcop/cmdtag.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"
}

#include <cstring>

namespace idem::pg {

namespace {

// The function's arguments, in the order of its SQL declaration.
enum {
    kArgScope,
    kArgKey,
    kArgRequestHash,
    kArgStatement,
    kArgParams,
    kArgStatusCode,
    kArgLockTtl,  // then retention, wait
};

// --- the kept statements -----------------------------------------------------------------

struct KeptStatement {
    uint64 hash;
    char *text;
    SPIPlanPtr plan;  // nullptr: an empty slot
    int nargs;
    Oid *types;
};

KeptStatement kept[core::kStatementCacheSize];
uint64 last_used[core::kStatementCacheSize];  // 0: never used
int running_in[core::kStatementCacheSize];    // calls running the slot's plan now
uint64 use_clock = 0;
MemoryContext kept_context = nullptr;

// Refuses what execute_once does not run: anything but one SELECT (without INTO), INSERT,
// UPDATE, DELETE or MERGE. Transaction control would end the transaction that holds the claim.
void check_statement_kind(List *parsed) noexcept {
    if (list_length(parsed) != 1)
        ereport(ERROR, (errcode(ERRCODE_SYNTAX_ERROR),
                        errmsg("idempotency.execute_once runs exactly one statement"),
                        errdetail("The statement text holds %d statements.", list_length(parsed))));
    Node *stmt = linitial_node(RawStmt, parsed)->stmt;
    switch (nodeTag(stmt)) {
        case T_InsertStmt:
        case T_UpdateStmt:
        case T_DeleteStmt:
        case T_MergeStmt:
            return;
        case T_SelectStmt:
            if (castNode(SelectStmt, stmt)->intoClause == nullptr) return;
            break;
        case T_TransactionStmt:
            ereport(ERROR,
                    (errcode(ERRCODE_INVALID_TRANSACTION_TERMINATION),
                     errmsg("idempotency.execute_once cannot run transaction control statements"),
                     errdetail("The statement runs inside the transaction that claims the key: "
                               "claim, statement and answer commit or roll back together."),
                     errhint("Outside a transaction block the call commits by itself.")));
        default:
            break;
    }
    ereport(ERROR,
            (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
             errmsg("idempotency.execute_once runs SELECT, INSERT, UPDATE, DELETE and MERGE only"),
             errdetail("The statement is %s.", GetCommandTagName(CreateCommandTag(stmt)))));
}

// The parameter types of a statement, inferred from where $1, $2, ... appear, as the server
// does for a Parse message without types; one that stays unknown is text.
void infer_parameter_types(RawStmt *raw, const char *sql, Oid **types, int *nargs) noexcept {
    *types = nullptr;
    *nargs = 0;
    // Analysis alone (the rewriter adds no parameter): unlike a Parse message's, it leaves a
    // parameter it cannot type unknown instead of refusing it.
    Query *query = parse_analyze_varparams(raw, sql, types, nargs, nullptr);
    // SELECT INTO (below a set operation too) becomes a utility statement here.
    if (query->commandType == CMD_UTILITY)
        ereport(ERROR,
                (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                 errmsg("idempotency.execute_once runs SELECT, INSERT, UPDATE, DELETE and MERGE "
                        "only"),
                 errdetail("The statement creates a table or runs a utility command.")));
    for (int i = 0; i < *nargs; i++)
        if ((*types)[i] == InvalidOid || (*types)[i] == UNKNOWNOID) (*types)[i] = TEXTOID;
}

// The statement for `sql`, prepared on first use and kept; *slot is its slot, or
// kStatementCacheSize for a plan that is not kept (every slot's plan is running: nested
// calls), freed with the SPI connection. SPI must be connected.
const KeptStatement *statement_plan(const char *sql, size_t *slot_out) noexcept {
    uint64 hash = core::statement_hash(std::string_view(sql, strlen(sql)));
    for (size_t i = 0; i < core::kStatementCacheSize; i++) {
        if (kept[i].plan != nullptr && kept[i].hash == hash && strcmp(kept[i].text, sql) == 0) {
            last_used[i] = ++use_clock;
            *slot_out = i;
            return &kept[i];
        }
    }
    List *parsed = pg_parse_query(sql);
    check_statement_kind(parsed);
    Oid *types;
    int nargs;
    infer_parameter_types(linitial_node(RawStmt, parsed), sql, &types, &nargs);
    SPIPlanPtr plan = SPI_prepare(sql, nargs, types);
    if (plan == nullptr)
        elog(ERROR, "idempotency: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));

    if (kept_context == nullptr)
        kept_context = AllocSetContextCreate(TopMemoryContext, "idempotency execute_once",
                                             ALLOCSET_SMALL_SIZES);
    size_t slot = core::slot_to_replace(last_used, running_in, core::kStatementCacheSize);
    *slot_out = slot;
    if (slot == core::kStatementCacheSize) {
        auto *unkept = static_cast<KeptStatement *>(palloc0(sizeof(KeptStatement)));
        unkept->plan = plan;
        unkept->nargs = nargs;
        unkept->types = types;
        return unkept;
    }
    KeptStatement *entry = &kept[slot];
    if (entry->plan != nullptr) {
        SPIPlanPtr old = entry->plan;
        entry->plan = nullptr;
        pfree(entry->text);
        if (entry->types != nullptr) pfree(entry->types);
        SPI_freeplan(old);
    }
    entry->hash = hash;
    entry->text = MemoryContextStrdup(kept_context, sql);
    entry->nargs = nargs;
    entry->types = nullptr;
    if (nargs > 0) {
        entry->types = static_cast<Oid *>(MemoryContextAlloc(kept_context, nargs * sizeof(Oid)));
        memcpy(entry->types, types, nargs * sizeof(Oid));
    }
    if (SPI_keepplan(plan) != 0) elog(ERROR, "idempotency: SPI_keepplan failed");
    entry->plan = plan;
    last_used[slot] = ++use_clock;
    return entry;
}

// --- parameters --------------------------------------------------------------------------

struct ParameterContext {
    int number;  // 1-based; 0 while no parameter is being read
};

void parameter_error_context(void *arg) noexcept {
    int number = static_cast<ParameterContext *>(arg)->number;
    if (number > 0)
        errcontext("parameter $%d of the statement of idempotency.execute_once", number);
}

// The call's params (text[], NULL for none), each converted by the input function of its
// parameter's type; a NULL element is NULL.
void bind_parameters(FunctionCallInfo fcinfo, const KeptStatement *statement, Datum **values,
                     char **nulls) {
    Datum *elements = nullptr;
    bool *element_nulls = nullptr;
    int given = 0;
    if (!PG_ARGISNULL(kArgParams)) {
        ArrayType *params = PG_GETARG_ARRAYTYPE_P(kArgParams);
        if (ARR_NDIM(params) > 1)
            throw SqlError(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "params must be a one-dimensional array");
        deconstruct_array(params, TEXTOID, -1, false, TYPALIGN_INT, &elements, &element_nulls,
                          &given);
    }
    core::check_parameter_count(size_t(given), size_t(statement->nargs));
    *values = static_cast<Datum *>(palloc0(Max(given, 1) * sizeof(Datum)));
    *nulls = static_cast<char *>(palloc(Max(given, 1)));
    ParameterContext where = {0};
    ErrorContextCallback callback;
    callback.callback = pg_callback(parameter_error_context);
    callback.arg = &where;
    callback.previous = error_context_stack;
    error_context_stack = &callback;
    for (int i = 0; i < given; i++) {
        (*nulls)[i] = element_nulls[i] ? 'n' : ' ';
        if (element_nulls[i]) continue;
        where.number = i + 1;
        Oid input;
        Oid io_param;
        getTypeInputInfo(statement->types[i], &input, &io_param);
        (*values)[i] = OidInputFunctionCall(input, TextDatumGetCString(elements[i]), io_param, -1);
    }
    error_context_stack = callback.previous;
}

// --- the statement and its answer --------------------------------------------------------

// The keys whose statement is running in this backend, innermost first: a statement that
// calls execute_once for its own key is refused.
struct RunningStatement {
    text *scope;
    text *key;
    RunningStatement *outer;
};
RunningStatement *running = nullptr;

bool same_text(const text *a, const text *b) {
    return text_view(a) == text_view(b);
}

void check_not_running(Datum scope, Datum key) {
    for (const RunningStatement *r = running; r != nullptr; r = r->outer)
        if (same_text(r->scope, DatumGetTextPP(scope)) && same_text(r->key, DatumGetTextPP(key)))
            throw SqlError(ERRCODE_OBJECT_IN_USE,
                           "idempotency.execute_once was called for a key by its own statement",
                           "The key's statement is running: its answer is not known yet.",
                           "Call execute_once for another key, or do the work in the statement.");
}

// The response of a statement's result (core::response_form); SPI connected, the result in
// SPI_tuptable.
Datum result_response(bool *is_null) noexcept {
    SPITupleTable *table = SPI_tuptable;
    int columns = table != nullptr ? table->tupdesc->natts : 0;
    Oid first_type = columns > 0 ? TupleDescAttr(table->tupdesc, 0)->atttypid : InvalidOid;
    bool first_is_json = first_type == JSONBOID || first_type == JSONOID;
    *is_null = false;
    Datum response = (Datum)0;
    switch (core::response_form(table != nullptr, SPI_processed, columns, first_is_json)) {
        case core::ResponseForm::Null:
            *is_null = true;
            return (Datum)0;
        case core::ResponseForm::TooManyRows:
            ereport(ERROR,
                    (errcode(ERRCODE_CARDINALITY_VIOLATION),
                     errmsg("the statement of idempotency.execute_once returned more than one row"),
                     errdetail("The response is one row, one json or jsonb value, or NULL."),
                     errhint("Aggregate the rows into one value (jsonb_agg), or return one row.")));
            pg_unreachable();
        case core::ResponseForm::ColumnValue: {
            Datum value = SPI_getbinval(table->vals[0], table->tupdesc, 1, is_null);
            if (*is_null) return (Datum)0;
            if (first_type == JSONBOID)
                response = PointerGetDatum(DatumGetJsonbP(value));  // detoasted
            else
                response =
                    DirectFunctionCall1(jsonb_in, CStringGetDatum(TextDatumGetCString(value)));
            break;
        }
        case core::ResponseForm::RowObject: {
            Datum row = PointerGetDatum(SPI_returntuple(table->vals[0], table->tupdesc));
            Datum json = DirectFunctionCall1(row_to_json, row);
            response = DirectFunctionCall1(jsonb_in, CStringGetDatum(TextDatumGetCString(json)));
            break;
        }
    }
    if (VARSIZE(DatumGetPointer(response)) > core::kMaxResponseBytes)
        ereport(ERROR,
                (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                 errmsg("the result of the statement of idempotency.execute_once is too "
                        "large"),
                 errdetail("It takes %zu bytes as jsonb; the limit is %zu bytes.",
                           size_t(VARSIZE(DatumGetPointer(response))), core::kMaxResponseBytes)));
    return SPI_datumTransfer(response, false, -1);
}

void unmark_running(RunningStatement *entry, size_t slot) noexcept {
    running = entry->outer;
    if (slot < core::kStatementCacheSize) running_in[slot]--;
}

// Runs the plan with the statement's key refused to nested calls and its plan never replaced
// by theirs, both undone however it ends. A function of its own: nothing of the caller's
// lives across the longjmp of PG_TRY.
pg_noinline int execute_marked(SPIPlanPtr plan, Datum *values, char *nulls, RunningStatement *entry,
                               size_t slot) noexcept {
    entry->outer = running;
    running = entry;
    if (slot < core::kStatementCacheSize) running_in[slot]++;
    volatile int rc = 0;
    // PG_CATCH rather than PG_FINALLY: the latter's flag draws -Wclobbered under -O2 and UBSan.
    PG_TRY();
    { rc = SPI_execute_plan(plan, values, nulls, false, 2); }
    PG_CATCH();
    {
        unmark_running(entry, slot);
        PG_RE_THROW();
    }
    PG_END_TRY();
    unmark_running(entry, slot);
    return rc;
}

// Runs the call's statement with its parameters as the caller; returns its response.
Datum run_statement(FunctionCallInfo fcinfo, RunningStatement *entry, bool *response_null) {
    const char *sql = TextDatumGetCString(required_arg(fcinfo, kArgStatement, "statement"));
    spi_connect();
    size_t slot;
    const KeptStatement *statement = statement_plan(sql, &slot);
    Datum *values;
    char *nulls;
    bind_parameters(fcinfo, statement, &values, &nulls);

    int rc = execute_marked(statement->plan, values, nulls, entry, slot);
    if (rc < 0)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("idempotency.execute_once could not run the statement: %s",
                               SPI_result_code_string(rc))));
    Datum response = result_response(response_null);
    spi_check(SPI_finish(), SPI_OK_FINISH, "SPI_finish");
    return response;
}

}  // namespace

// execute_once(scope, key, request_hash, statement, params, status_code, lock_ttl, retention,
// wait) → idempotency.reservation.
IDEM_FUNCTION(idem_execute_once) {
    PreventCommandIfReadOnly("idempotency.execute_once()");
    if (key_table_is_citus())
        throw SqlError(ERRCODE_FEATURE_NOT_SUPPORTED,
                       "idempotency.execute_once is not available where Citus distributes the keys",
                       "Its statement would run on the coordinator, and the key's claim on the "
                       "worker of the scope's shard, in another transaction.",
                       "Call reserve, run the statement and call complete in one transaction "
                       "(docs/citus.md).");
    Datum scope = name_arg(fcinfo, kArgScope, "scope");
    Datum key = name_arg(fcinfo, kArgKey, "key");
    (void)required_arg(fcinfo, kArgStatement, "statement");
    int32 status_code = DatumGetInt32(required_arg(fcinfo, kArgStatusCode, "status_code"));
    core::check_status_code(status_code);
    check_not_running(scope, key);

    StatementClaim claim = reserve_for_statement(fcinfo, kArgLockTtl);
    if (!claim.claimed) return claim.reservation;
    RunningStatement entry = {DatumGetTextPP(scope), DatumGetTextPP(key), nullptr};
    bool response_null;
    Datum response = run_statement(fcinfo, &entry, &response_null);
    return complete_statement_claim(fcinfo, claim, status_code, response, response_null);
}

}  // namespace idem::pg
