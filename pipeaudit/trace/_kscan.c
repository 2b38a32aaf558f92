/* _kscan: a compiled scanner from batches of Kineto trace events to columns.
 *
 * Scanner(dropped, want).scan(data) reads `data`, the text of complete traceEvents elements
 * separated by commas (`{...},{...},...{...}`, any whitespace between), onto the columns
 * that pipeaudit.trace.columns.TableParts builds from msgspec-decoded events: the kept
 * complete events (ph "X", category not in `dropped`) and the "[memory]" instant events.
 * The batches of a file accumulate on one set of columns (and one table of strings), and
 * take() hands them over at once: the columns become polars Series once per file, not once
 * per batch. A batch that is not answered leaves the columns as they were before it.
 * No Python object is made per event: strings are interned (one str per distinct value),
 * numbers go straight into int64 buffers, and ts/dur are converted from their decimal
 * text to integer nanoseconds exactly.
 *
 * The pass over the text touches no Python object and runs without the GIL (another
 * thread of the process, e.g. one importing modules, runs meanwhile): its buffers are raw
 * C memory, the distinct strings are kept as byte spans, and their `str` objects are made
 * once the pass is over.
 *
 * It answers only when its answer is certainly the msgspec path's: on anything else
 * (a syntax error, a cut that is not an event boundary, a field of the wrong type, an
 * escape in a kept string, a ts with more than three decimals or an exponent, an args value
 * that is not an integer, a duplicate key, deep nesting, a string that is not UTF-8) it
 * returns None and the caller decodes the batch with msgspec, which gives the exact result
 * or the exact error.
 */
#define PY_SSIZE_T_CLEAN
#ifdef __linux__
#define _GNU_SOURCE /* mremap */
#endif
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

typedef const unsigned char *cptr;

/* Return codes of the scan's functions: 0 done, 1 not answered here, -1 out of memory. */
#define NOT_HERE 1
#define NO_MEMORY (-1)

/* ------------------------------------------------------------------ buffers */

/* Raw C memory (callable without the GIL). A buffer of MAPPED_MIN bytes or more is its own
 * memory mapping on Linux, grown by mremap (no copy) and unmapped when freed: a column's
 * buffer is handed to Python as it is (take(): no copy), and when its table is gone the
 * memory goes back to the system at once, whatever the C library's heap thresholds are
 * (glibc's rise with the blocks freed, and the holes of a heap stay resident). */
typedef struct {
    char *data;
    size_t len, cap;
    int mapped;
} Buf;

#define MAPPED_MIN ((size_t)1 << 20)

static void buf_free(Buf *b)
{
#ifdef __linux__
    if (b->mapped)
        munmap(b->data, b->cap);
    else
#endif
        PyMem_RawFree(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->mapped = 0;
}

static int buf_grow(Buf *b, size_t extra)
{
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra)
        cap *= 2;
#ifdef __linux__
    if (cap >= MAPPED_MIN) {
        void *p;
        if (b->mapped) {
            p = mremap(b->data, b->cap, cap, MREMAP_MAYMOVE);
        } else {
            p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p != MAP_FAILED) {
                if (b->len)
                    memcpy(p, b->data, b->len);
                PyMem_RawFree(b->data);
            }
        }
        if (p == MAP_FAILED)
            return NO_MEMORY;
        b->data = p;
        b->cap = cap;
        b->mapped = 1;
        return 0;
    }
#endif
    char *p = PyMem_RawRealloc(b->data, cap);
    if (p == NULL)
        return NO_MEMORY;
    b->data = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, size_t n)
{
    if (n == 0)
        return 0; /* memcpy with a NULL buffer is undefined even for 0 bytes */
    if (b->len + n > b->cap && buf_grow(b, n) < 0)
        return NO_MEMORY;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, sizeof v); }
static inline int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, sizeof v); }
static inline int put_u8(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }

/* ------------------------------------------------------------------ interned strings */

typedef struct {
    uint64_t hash;
    size_t off;
    uint32_t len;
    int32_t code; /* -1: empty slot */
} Slot;

typedef struct {
    Slot *slots;
    size_t mask, count;
    Buf arena;  /* the bytes of every distinct string, in code order */
} Intern;

/* A string's hash: FNV-1a over 8-byte words (then the tail bytes), mixed at the end. */
static uint64_t fnv1a(cptr s, size_t n)
{
    uint64_t h = 1469598103934665603ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h ^= w;
        h *= 1099511628211ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) {
        h ^= s[i];
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 32);
}

static int intern_init(Intern *t)
{
    memset(t, 0, sizeof *t);
    t->mask = 1023;
    t->slots = PyMem_RawMalloc(sizeof(Slot) * (t->mask + 1));
    if (t->slots == NULL)
        return NO_MEMORY;
    for (size_t i = 0; i <= t->mask; i++)
        t->slots[i].code = -1;
    return 0;
}

static void intern_free(Intern *t)
{
    PyMem_RawFree(t->slots);
    buf_free(&t->arena);
}

/* A new slot table of mask + 1 slots holding the strings whose code is below `below`. */
static int intern_reslot(Intern *t, size_t mask, size_t below)
{
    Slot *slots = PyMem_RawMalloc(sizeof(Slot) * (mask + 1));
    if (slots == NULL)
        return NO_MEMORY;
    for (size_t i = 0; i <= mask; i++)
        slots[i].code = -1;
    for (size_t i = 0; i <= t->mask; i++) {
        Slot s = t->slots[i];
        if (s.code < 0 || (size_t)s.code >= below)
            continue;
        size_t j = s.hash & mask;
        while (slots[j].code >= 0)
            j = (j + 1) & mask;
        slots[j] = s;
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->mask = mask;
    return 0;
}

static int intern_rehash(Intern *t) { return intern_reslot(t, t->mask * 2 + 1, t->count); }

/* The code of string `s` (its bytes as they are in the text, without escapes); -1 when out
 * of memory. Whether the bytes are UTF-8 is checked when the strings are made. */
static int32_t intern(Intern *t, cptr s, size_t n, size_t *at)
{
    uint64_t h = fnv1a(s, n);
    size_t j = h & t->mask;
    for (;;) {
        Slot *slot = &t->slots[j];
        if (slot->code < 0)
            break;
        if (slot->hash == h && slot->len == n &&
            (n == 0 || memcmp(t->arena.data + slot->off, s, n) == 0)) {
            *at = slot->off;
            return slot->code;
        }
        j = (j + 1) & t->mask;
    }
    if (t->count >= INT32_MAX || n > UINT32_MAX)
        return NO_MEMORY;
    int32_t code = (int32_t)t->count;
    size_t off = t->arena.len;
    if (buf_put(&t->arena, s, n) < 0)
        return NO_MEMORY;
    t->count++;
    *at = off;
    Slot *slot = &t->slots[j];
    slot->hash = h;
    slot->off = off;
    slot->len = (uint32_t)n;
    slot->code = code;
    if (t->count * 2 > t->mask && intern_rehash(t) < 0)
        return NO_MEMORY;
    return code;
}

/* ------------------------------------------------------------------ JSON tokens */

enum { K_MISSING = 0, K_STRING, K_NUMBER, K_NULL, K_OBJECT, K_OTHER };

typedef struct {
    cptr p;     /* string: its content (without quotes); number: its text */
    size_t n;
    int kind;
    int escaped; /* string with a backslash escape */
    int is_int;  /* number without fraction or exponent */
} Tok;

#define MAX_DEPTH 64

/* SSE2 (every x86-64 CPU): whitespace and plain string bytes are skipped 16 at a time.
 * Elsewhere the byte loops below do the same work one byte at a time. */
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
#define KSCAN_SSE2 1
#endif

/* Byte classes: JSON whitespace; bytes that end a run of plain string content. */
static unsigned char IS_WS[256], STRING_STOP[256];

static void init_tables(void)
{
    IS_WS[' '] = IS_WS['\n'] = IS_WS['\r'] = IS_WS['\t'] = 1;
    for (int c = 0; c < 0x20; c++)
        STRING_STOP[c] = 1;
    STRING_STOP['"'] = STRING_STOP['\\'] = 1;
}

static inline cptr skip_ws(cptr p, cptr end)
{
#ifdef KSCAN_SSE2
    if (p < end && !IS_WS[*p])
        return p; /* the common case: no whitespace at all */
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i ws = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\n'))),
            _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\t'))));
        unsigned other = (unsigned)_mm_movemask_epi8(ws) ^ 0xFFFFu;
        if (other)
            return p + __builtin_ctz(other);
        p += 16;
    }
#endif
    while (p < end && IS_WS[*p])
        p++;
    return p;
}

/* The first byte at or after `p` that ends a run of plain string content (a quote, a
 * backslash or a control byte), or `end`. */
static inline cptr string_stop(cptr p, cptr end)
{
#ifdef KSCAN_SSE2
    const __m128i below = _mm_set1_epi8(0x1F);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i stop = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
            _mm_cmpeq_epi8(_mm_max_epu8(x, below), below)); /* x <= 0x1F, unsigned */
        unsigned m = (unsigned)_mm_movemask_epi8(stop);
        if (m)
            return p + __builtin_ctz(m);
        p += 16;
    }
#endif
    while (p < end && !STRING_STOP[*p])
        p++;
    return p;
}

static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string at `p` (its opening quote); returns the position after it, or NULL. */
static cptr scan_string(cptr p, cptr end, Tok *tok)
{
    p++;
    cptr start = p;
    int escaped = 0;
    for (;;) {
        /* the common case: plain bytes */
        p = string_stop(p, end);
        if (p >= end || *p < 0x20)
            return NULL;
        if (*p == '"')
            break;
        /* an escape */
        escaped = 1;
        if (p + 1 >= end)
            return NULL;
        unsigned char c = p[1];
        if (c == 'u') {
            if (p + 6 > end)
                return NULL;
            int v = 0;
            for (int i = 2; i < 6; i++) {
                int h = hexval(p[i]);
                if (h < 0)
                    return NULL;
                v = v * 16 + h;
            }
            if (v >= 0xD800 && v <= 0xDFFF)
                return NULL; /* surrogate pairs: left to msgspec */
            p += 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' ||
                   c == 'r' || c == 't') {
            p += 2;
        } else {
            return NULL;
        }
    }
    if (tok) {
        tok->p = start;
        tok->n = (size_t)(p - start);
        tok->kind = K_STRING;
        tok->escaped = escaped;
    }
    return p + 1;
}

static cptr one_or_more_digits(cptr p, cptr end)
{
    if (p >= end || !is_digit(*p))
        return NULL;
    while (p < end && is_digit(*p))
        p++;
    return p;
}

/* A number (strict JSON grammar); returns the position after it, or NULL. */
static cptr scan_number(cptr p, cptr end, Tok *tok)
{
    cptr start = p;
    int is_int = 1;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return NULL;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && is_digit(*p))
            p++;
    else
        return NULL;
    if (p < end && *p == '.') {
        p = one_or_more_digits(p + 1, end);
        if (p == NULL)
            return NULL;
        is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        p = one_or_more_digits(p, end);
        if (p == NULL)
            return NULL;
        is_int = 0;
    }
    if (tok) {
        tok->p = start;
        tok->n = (size_t)(p - start);
        tok->kind = K_NUMBER;
        tok->is_int = is_int;
    }
    return p;
}

static cptr scan_literal(cptr p, cptr end, const char *word, size_t n)
{
    if ((size_t)(end - p) < n || memcmp(p, word, n) != 0)
        return NULL;
    return p + n;
}

static cptr skip_value(cptr p, cptr end, int depth);

static cptr skip_container(cptr p, cptr end, int depth, unsigned char close)
{
    if (depth > MAX_DEPTH)
        return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == close)
        return p + 1;
    for (;;) {
        if (close == '}') {
            if (p >= end || *p != '"')
                return NULL;
            p = scan_string(p, end, NULL);
            if (p == NULL)
                return NULL;
            p = skip_ws(p, end);
            if (p >= end || *p != ':')
                return NULL;
            p = skip_ws(p + 1, end);
        }
        p = skip_value(p, end, depth + 1);
        if (p == NULL)
            return NULL;
        p = skip_ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == close)
            return p + 1;
        if (*p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

/* Any JSON value at `p` (no leading whitespace); returns the position after it, or NULL. */
static cptr skip_value(cptr p, cptr end, int depth)
{
    if (p >= end)
        return NULL;
    switch (*p) {
    case '"':
        return scan_string(p, end, NULL);
    case '{':
        return skip_container(p, end, depth, '}');
    case '[':
        return skip_container(p, end, depth, ']');
    case 't':
        return scan_literal(p, end, "true", 4);
    case 'f':
        return scan_literal(p, end, "false", 5);
    case 'n':
        return scan_literal(p, end, "null", 4);
    default:
        return scan_number(p, end, NULL);
    }
}

/* A value read into `tok`: strings, numbers and null are described, other values skipped
 * (K_OTHER). */
static cptr read_value(cptr p, cptr end, Tok *tok)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return scan_string(p, end, tok);
    if (*p == 'n') {
        tok->kind = K_NULL;
        return scan_literal(p, end, "null", 4);
    }
    if (*p == '-' || is_digit(*p))
        return scan_number(p, end, tok);
    tok->kind = K_OTHER;
    tok->p = p;
    cptr q = skip_value(p, end, 1);
    if (q)
        tok->n = (size_t)(q - p);
    return q;
}

/* ------------------------------------------------------------------ numbers */

#define LIMIT_NS (((int64_t)1) << 62)

/* Exact ns of a decimal number of µs with at most three decimals and no exponent;
 * 0 on success, -1 when the value is outside what is answered here. */
static int us_to_ns(const Tok *tok, int64_t *out)
{
    if (tok->kind != K_NUMBER)
        return -1;
    cptr p = tok->p, end = tok->p + tok->n;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    uint64_t whole = 0;
    int digits = 0;
    while (p < end && is_digit(*p)) {
        whole = whole * 10 + (uint64_t)(*p - '0');
        if (++digits > 16)
            return -1;
        p++;
    }
    uint64_t frac = 0;
    int fdigits = 0;
    if (p < end && *p == '.') {
        p++;
        while (p < end && is_digit(*p)) {
            if (++fdigits > 3)
                return -1;
            frac = frac * 10 + (uint64_t)(*p - '0');
            p++;
        }
    }
    if (p != end)
        return -1; /* an exponent */
    for (int i = fdigits; i < 3; i++)
        frac *= 10;
    uint64_t ns = whole * 1000 + frac; /* < 1e19: fits */
    if (ns >= (uint64_t)LIMIT_NS)
        return -1;
    *out = neg ? -(int64_t)ns : (int64_t)ns;
    return 0;
}

/* An integer args value: 1 and *out set for an integer, 0 for null or missing,
 * -1 for anything else (left to the msgspec path). */
static int arg_int(const Tok *tok, int64_t *out)
{
    if (tok->kind == K_MISSING || tok->kind == K_NULL)
        return 0;
    if (tok->kind != K_NUMBER || !tok->is_int || tok->n > 18)
        return -1;
    cptr p = tok->p, end = tok->p + tok->n;
    int neg = (*p == '-');
    if (neg)
        p++;
    int64_t v = 0;
    while (p < end)
        v = v * 10 + (*p++ - '0');
    *out = neg ? -v : v;
    return 1;
}

/* ------------------------------------------------------------------ one event */

enum { A_CORRELATION, A_TOTAL_ALLOCATED, A_DEVICE_ID, A_DEVICE_TYPE, A_EXTERNAL_ID, A_STREAM,
       A_DEVICE, A_SRC_RANK, A_DST_RANK, A_SEQ, N_ARGS };
enum { F_PH, F_NAME, F_CAT, F_TS, F_DUR, F_TID, F_PID, F_ARGS, N_FIELDS };

typedef struct {
    Tok f[N_FIELDS];
    Tok a[N_ARGS];
} Event;

#define IS(lit) (memcmp(s, lit, sizeof(lit) - 1) == 0) /* s holds n == sizeof(lit) - 1 bytes */

/* The index of an event's key (F_*), or -1: one comparison of a known length, inlined. */
static inline int field_index(cptr s, size_t n)
{
    switch (n) {
    case 2:
        return IS("ph") ? F_PH : IS("ts") ? F_TS : -1;
    case 3:
        return IS("cat") ? F_CAT : IS("dur") ? F_DUR : IS("tid") ? F_TID : IS("pid") ? F_PID : -1;
    case 4:
        return IS("name") ? F_NAME : IS("args") ? F_ARGS : -1;
    default:
        return -1;
    }
}

/* The index of an args key (A_*), or -1. */
static inline int arg_index(cptr s, size_t n)
{
    switch (n) {
    case 3:
        return IS("Seq") ? A_SEQ : -1;
    case 6:
        return IS("stream") ? A_STREAM : IS("device") ? A_DEVICE : -1;
    case 8:
        return IS("Src Rank") ? A_SRC_RANK : IS("Dst Rank") ? A_DST_RANK : -1;
    case 9:
        return IS("Device Id") ? A_DEVICE_ID : -1;
    case 11:
        return IS("correlation") ? A_CORRELATION : IS("Device Type") ? A_DEVICE_TYPE
             : IS("External id") ? A_EXTERNAL_ID : -1;
    case 15:
        return IS("Total Allocated") ? A_TOTAL_ALLOCATED : -1;
    default:
        return -1;
    }
}
#undef IS

/* The members of an object at `p` ('{'): an event's keys (`is_args` 0: F_*) or its args'
 * keys (A_*) are read into `toks` (a duplicate is refused), the others skipped; an event's
 * args object is read into `args`. */
static cptr read_object(cptr p, cptr end, int is_args, Tok *toks, Tok *args)
{
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        Tok key;
        if (p >= end || *p != '"')
            return NULL;
        p = scan_string(p, end, &key);
        if (p == NULL || key.escaped)
            return NULL; /* an escaped key may spell a known one: left to msgspec */
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return NULL;
        p = skip_ws(p + 1, end);
        int i = is_args ? arg_index(key.p, key.n) : field_index(key.p, key.n);
        if (i < 0) {
            p = skip_value(p, end, 2);
        } else {
            if (toks[i].kind != K_MISSING)
                return NULL;
            if (!is_args && i == F_ARGS && p < end && *p == '{') {
                toks[i].kind = K_OBJECT;
                p = read_object(p, end, 1, args, NULL);
            } else {
                p = read_value(p, end, &toks[i]);
            }
        }
        if (p == NULL)
            return NULL;
        p = skip_ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == '}')
            return p + 1;
        if (*p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

static int is_ascii(cptr s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0x80)
            return 0;
    return 1;
}

/* msgspec's typed fields: ph/name/cat strings, args an object or null. */
static int types_ok(const Event *e)
{
    for (int i = F_PH; i <= F_CAT; i++)
        if (e->f[i].kind != K_MISSING && e->f[i].kind != K_STRING)
            return 0;
    int args = e->f[F_ARGS].kind;
    if (args != K_MISSING && args != K_NULL && args != K_OBJECT)
        return 0;
    /* the args values msgspec decodes (typed Any) must be values it can decode: integers,
     * null, or ASCII strings here (a column that needs a string parsed is left to msgspec) */
    for (int i = 0; i < N_ARGS; i++) {
        int64_t v;
        const Tok *a = &e->a[i];
        if (a->kind == K_STRING && is_ascii(a->p, a->n))
            continue;
        if (a->kind != K_MISSING && arg_int(a, &v) < 0)
            return 0;
    }
    return 1;
}

static int tok_is(const Tok *t, const char *s)
{
    size_t n = strlen(s);
    return t->kind == K_STRING && t->n == n && memcmp(t->p, s, n) == 0;
}

/* ------------------------------------------------------------------ the columns */

enum { WANT_TID = 1, WANT_PID = 2, WANT_CORRELATION = 4, WANT_EXTERNAL_ID = 8, WANT_STREAM = 16,
       WANT_DEVICE = 32, WANT_SRC_RANK = 64, WANT_DST_RANK = 128, WANT_SEQ = 256 };

/* The integer args kept as event columns (N_KEPT of them). */
#define N_KEPT 7

/* The last string a column interned (its code, where its bytes are in the arena): an event
 * often has the previous one's category or thread, found again without hashing. */
typedef struct {
    int32_t code; /* -1: none */
    uint32_t len;
    size_t off;
} Last;

enum { L_NAME, L_CAT, L_TID, L_PID, N_LAST };

typedef struct {
    Intern strings;
    Last last[N_LAST];
    Buf name, cat, tid, pid, ts, ts_missing, dur, dur_missing;
    Buf arg[N_KEPT], arg_valid[N_KEPT]; /* KEPT_NAMES, in that order */
    Buf mts, mts_missing, mem[3], mem_valid[3]; /* total allocated, device id, device type */
    Py_ssize_t n_events, n_kept, n_mem, begin_end;
} Columns;

static const int KEPT_ARGS[N_KEPT] = {A_CORRELATION, A_EXTERNAL_ID, A_STREAM, A_DEVICE,
                                      A_SRC_RANK, A_DST_RANK, A_SEQ};
static const int KEPT_WANT[N_KEPT] = {WANT_CORRELATION, WANT_EXTERNAL_ID, WANT_STREAM, WANT_DEVICE,
                                      WANT_SRC_RANK, WANT_DST_RANK, WANT_SEQ};
static const char *const KEPT_NAMES[N_KEPT] = {"correlation", "external_id", "stream", "device",
                                               "src_rank", "dst_rank", "seq"};
static const int MEM_ARGS[3] = {A_TOTAL_ALLOCATED, A_DEVICE_ID, A_DEVICE_TYPE};
static const char *const MEM_NAMES[3] = {"total_allocated", "device_id", "device_type"};

/* Every buffer of the columns, in a fixed order. */
#define N_BUFS (10 + 2 * N_KEPT + 6)

static void columns_bufs(Columns *c, Buf **out)
{
    Buf *fixed[] = {&c->name, &c->cat, &c->tid, &c->pid, &c->ts, &c->ts_missing, &c->dur,
                    &c->dur_missing, &c->mts, &c->mts_missing};
    int k = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        out[k++] = fixed[i];
    for (int i = 0; i < N_KEPT; i++) {
        out[k++] = &c->arg[i];
        out[k++] = &c->arg_valid[i];
    }
    for (int i = 0; i < 3; i++) {
        out[k++] = &c->mem[i];
        out[k++] = &c->mem_valid[i];
    }
}

static void columns_free(Columns *c)
{
    intern_free(&c->strings);
    Buf *bufs[N_BUFS];
    columns_bufs(c, bufs);
    for (int i = 0; i < N_BUFS; i++)
        buf_free(bufs[i]);
}

static const unsigned char EMPTY[1] = {0};

/* The code of the `n` bytes at `s`: the column's last string again, or interned. */
static inline int32_t code_of(Intern *t, Last *last, cptr s, size_t n)
{
    if (last->code >= 0 && last->len == n && (n == 0 || memcmp(t->arena.data + last->off, s, n) == 0))
        return last->code;
    size_t at = 0;
    int32_t code = intern(t, s, n, &at);
    if (code >= 0) {
        last->code = code;
        last->len = (uint32_t)n;
        last->off = at;
    }
    return code;
}

/* A string field (missing: ""). */
static int put_string(Intern *t, Last *last, Buf *out, const Tok *tok)
{
    if (tok->kind == K_STRING && tok->escaped)
        return NOT_HERE;
    int32_t code = tok->kind == K_STRING ? code_of(t, last, tok->p, tok->n) : code_of(t, last, EMPTY, 0);
    return code < 0 ? NO_MEMORY : put_i32(out, code);
}

/* pid / tid: a number keeps its text, a string its content, null or missing is "". */
static int put_text(Intern *t, Last *last, Buf *out, const Tok *tok)
{
    if (tok->kind == K_OTHER)
        return NOT_HERE;
    if (tok->kind == K_NUMBER) {
        int32_t code = code_of(t, last, tok->p, tok->n);
        return code < 0 ? NO_MEMORY : put_i32(out, code);
    }
    if (tok->kind == K_STRING)
        return put_string(t, last, out, tok);
    return put_string(t, last, out, &(Tok){.kind = K_MISSING});
}

static int put_time(Buf *ns, Buf *missing, const Tok *tok)
{
    int64_t v = 0;
    if (tok->kind != K_MISSING && us_to_ns(tok, &v) < 0)
        return NOT_HERE;
    if (put_i64(ns, v) < 0 || put_u8(missing, tok->kind == K_MISSING) < 0)
        return NO_MEMORY;
    return 0;
}

static int put_arg(Buf *values, Buf *valid, const Tok *tok)
{
    int64_t v = 0;
    int r = arg_int(tok, &v);
    if (r < 0)
        return NOT_HERE;
    if (put_i64(values, r ? v : 0) < 0 || put_u8(valid, (uint8_t)r) < 0)
        return NO_MEMORY;
    return 0;
}

#define TRY(x)                     \
    do {                           \
        int rc_ = (x);             \
        if (rc_)                   \
            return rc_;            \
    } while (0)

/* The categories whose complete events are dropped, copied out of the caller's tuple of
 * bytes before the GIL is released. */
typedef struct {
    Py_ssize_t n;
    const char **p;
    size_t *len;
} Dropped;

static int emit(Columns *c, const Event *e, const Dropped *dropped, int want)
{
    const Tok *ph = &e->f[F_PH];
    if (tok_is(ph, "X")) {
        const Tok *cat = &e->f[F_CAT];
        if (cat->escaped)
            return NOT_HERE;
        size_t n = cat->kind == K_STRING ? cat->n : 0;
        for (Py_ssize_t i = 0; i < dropped->n; i++)
            if (dropped->len[i] == n && (n == 0 || memcmp(dropped->p[i], cat->p, n) == 0))
                return 0;
        TRY(put_string(&c->strings, &c->last[L_NAME], &c->name, &e->f[F_NAME]));
        TRY(put_string(&c->strings, &c->last[L_CAT], &c->cat, cat));
        TRY(put_time(&c->ts, &c->ts_missing, &e->f[F_TS]));
        TRY(put_time(&c->dur, &c->dur_missing, &e->f[F_DUR]));
        if (want & WANT_TID)
            TRY(put_text(&c->strings, &c->last[L_TID], &c->tid, &e->f[F_TID]));
        if (want & WANT_PID)
            TRY(put_text(&c->strings, &c->last[L_PID], &c->pid, &e->f[F_PID]));
        for (int i = 0; i < N_KEPT; i++)
            if (want & KEPT_WANT[i])
                TRY(put_arg(&c->arg[i], &c->arg_valid[i], &e->a[KEPT_ARGS[i]]));
        c->n_kept++;
    } else if (tok_is(ph, "i") || tok_is(ph, "I")) {
        const Tok *name = &e->f[F_NAME];
        if (name->kind == K_STRING && name->escaped)
            return NOT_HERE;
        if (!tok_is(name, "[memory]"))
            return 0;
        TRY(put_time(&c->mts, &c->mts_missing, &e->f[F_TS]));
        for (int i = 0; i < 3; i++)
            TRY(put_arg(&c->mem[i], &c->mem_valid[i], &e->a[MEM_ARGS[i]]));
        c->n_mem++;
    } else if (tok_is(ph, "B") || tok_is(ph, "E")) {
        c->begin_end++;
    } else if (ph->kind == K_STRING && ph->escaped) {
        return NOT_HERE;
    }
    return 0;
}

/* ------------------------------------------------------------------ marks and rollback */

/* What the columns held before a batch: a batch that is not answered is taken back to it. */
typedef struct {
    size_t lens[N_BUFS];
    Py_ssize_t n_events, n_kept, n_mem, begin_end;
    size_t n_strings, arena_len;
} Mark;

static void mark(Columns *c, Mark *m)
{
    Buf *bufs[N_BUFS];
    columns_bufs(c, bufs);
    for (int i = 0; i < N_BUFS; i++)
        m->lens[i] = bufs[i]->len;
    m->n_events = c->n_events;
    m->n_kept = c->n_kept;
    m->n_mem = c->n_mem;
    m->begin_end = c->begin_end;
    m->n_strings = c->strings.count;
    m->arena_len = c->strings.arena.len;
}

/* Drop the strings interned since the mark: the slot table is rebuilt from the older ones
 * (a rehash may have moved them, so they are not simply cleared). */
static int intern_truncate(Intern *t, size_t count, size_t arena_len)
{
    if (t->count == count)
        return 0;
    if (intern_reslot(t, t->mask, count) < 0)
        return NO_MEMORY;
    t->count = count;
    t->arena.len = arena_len;
    return 0;
}

static void forget_last(Columns *c)
{
    for (int i = 0; i < N_LAST; i++)
        c->last[i].code = -1;
}

static int rollback(Columns *c, const Mark *m)
{
    forget_last(c); /* their strings may be dropped */
    Buf *bufs[N_BUFS];
    columns_bufs(c, bufs);
    for (int i = 0; i < N_BUFS; i++)
        bufs[i]->len = m->lens[i];
    c->n_events = m->n_events;
    c->n_kept = m->n_kept;
    c->n_mem = m->n_mem;
    c->begin_end = m->begin_end;
    return intern_truncate(&c->strings, m->n_strings, m->arena_len);
}

/* Append the `str` of every string interned since `from` to `list` (codes in order):
 * 0 done, 1 one is not valid UTF-8 (nothing appended), -1 an exception. */
static int append_strings(const Intern *t, size_t from, PyObject *list)
{
    size_t n = t->count - from;
    if (n == 0)
        return 0;
    PyObject **made = PyMem_Calloc(n, sizeof(PyObject *));
    if (made == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    for (size_t j = 0; j <= t->mask && rc == 0; j++) {
        const Slot *slot = &t->slots[j];
        if (slot->code < 0 || (size_t)slot->code < from)
            continue;
        const char *s = t->arena.data ? t->arena.data + slot->off : "";
        PyObject *str = PyUnicode_DecodeUTF8(s, (Py_ssize_t)slot->len, "strict");
        if (str == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                rc = 1;
            } else {
                rc = -1;
            }
        }
        made[(size_t)slot->code - from] = str;
    }
    for (size_t k = 0; k < n && rc == 0; k++)
        if (PyList_Append(list, made[k]) < 0)
            rc = -1;
    if (rc == -1) /* undo a partial append */
        PyList_SetSlice(list, (Py_ssize_t)from, PyList_GET_SIZE(list), NULL);
    for (size_t k = 0; k < n; k++)
        Py_XDECREF(made[k]);
    PyMem_Free(made);
    return rc;
}

/* ------------------------------------------------------------------ the Scanner type */

/* One file's columns, batch after batch; the dropped categories are copied out of the
 * caller's tuple of bytes (the pass runs without the GIL). */
typedef struct {
    PyObject_HEAD
    Columns c;
    PyObject *strings;  /* list: code -> str, for every string interned so far */
    Dropped dropped;
    char *dropped_bytes;
    int want;
    int busy;           /* a scan is running (in another thread): refuse a second */
} ScannerObject;

static void scanner_dealloc(ScannerObject *self)
{
    columns_free(&self->c);
    Py_XDECREF(self->strings);
    PyMem_Free(self->dropped.p);
    PyMem_Free(self->dropped.len);
    PyMem_Free(self->dropped_bytes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *scanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dropped", "want", NULL};
    PyObject *tuple;
    int want;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!i", kwlist, &PyTuple_Type, &tuple, &want))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    size_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(d)) {
            PyErr_SetString(PyExc_TypeError, "dropped must be a tuple of bytes");
            return NULL;
        }
        total += (size_t)PyBytes_GET_SIZE(d);
    }
    ScannerObject *self = (ScannerObject *)type->tp_alloc(type, 0); /* zeroed */
    if (self == NULL)
        return NULL;
    self->want = want;
    self->dropped.n = n;
    self->dropped.p = PyMem_Malloc(sizeof(char *) * (size_t)(n ? n : 1));
    self->dropped.len = PyMem_Malloc(sizeof(size_t) * (size_t)(n ? n : 1));
    self->dropped_bytes = PyMem_Malloc(total ? total : 1);
    self->strings = PyList_New(0);
    if (self->dropped.p == NULL || self->dropped.len == NULL || self->dropped_bytes == NULL ||
        self->strings == NULL || intern_init(&self->c.strings) < 0) {
        Py_DECREF(self);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    forget_last(&self->c);
    size_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(tuple, i);
        size_t len = (size_t)PyBytes_GET_SIZE(d);
        memcpy(self->dropped_bytes + at, PyBytes_AS_STRING(d), len);
        self->dropped.p[i] = self->dropped_bytes + at;
        self->dropped.len[i] = len;
        at += len;
    }
    return (PyObject *)self;
}

/* 0: every event read, NOT_HERE: not answered here, NO_MEMORY. Touches no Python object. */
static int scan_events(Columns *c, cptr p, cptr end, const Dropped *dropped, int want)
{
    p = skip_ws(p, end);
    if (p >= end)
        return NOT_HERE; /* no event: left to the caller's usual path */
    for (;;) {
        if (*p != '{')
            return NOT_HERE;
        Event e;
        memset(&e, 0, sizeof e);
        p = read_object(p, end, 0, e.f, e.a);
        if (p == NULL || !types_ok(&e))
            return NOT_HERE;
        TRY(emit(c, &e, dropped, want));
        c->n_events++;
        p = skip_ws(p, end);
        if (p >= end)
            return 0;
        if (*p != ',')
            return NOT_HERE;
        p = skip_ws(p + 1, end);
        if (p >= end)
            return NOT_HERE;
    }
}

static PyObject *scanner_scan(ScannerObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (self->busy) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "Scanner.scan is already running in another thread");
        return NULL;
    }
    self->busy = 1;
    Columns *c = &self->c;
    Mark m;
    mark(c, &m);
    cptr p = (cptr)view.buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = scan_events(c, p, p + view.len, &self->dropped, self->want);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (rc == 0) {
        int s = append_strings(&c->strings, m.n_strings, self->strings);
        if (s == 0)
            out = PyLong_FromSsize_t(c->n_events - m.n_events);
        else if (s == 1)
            rc = NOT_HERE; /* a string that is not UTF-8: msgspec says what to do */
        else
            rc = -2;
    }
    if (out == NULL) {
        if (rollback(c, &m) < 0 && rc != -2) {
            rc = NO_MEMORY;
        }
        if (rc == NOT_HERE)
            out = Py_NewRef(Py_None);
        else if (rc == NO_MEMORY)
            PyErr_NoMemory();
        /* rc == -2: the exception is set */
    }
    self->busy = 0;
    return out;
}

static int set_item(PyObject *dict, const char *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc;
}

/* ------------------------------------------------------------------ UTF-8 check */

/* The length of the valid UTF-8 prefix of `s` (n when all of it is valid), as Python's
 * strict decoder judges: no overlong forms, no surrogates, nothing above U+10FFFF. ASCII
 * is skipped 16 bytes at a time. */
static size_t utf8_valid_prefix(cptr s, size_t n)
{
    size_t i = 0;
    while (i < n) {
#ifdef KSCAN_SSE2
        while (n - i >= 16 &&
               _mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(s + i))) == 0)
            i += 16;
        if (i >= n)
            break;
#endif
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF; /* bounds of the second byte */
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F;
        } else
            return i;
        if (n - i <= need)
            return i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return i;
        i += need + 1;
    }
    return n;
}

static PyObject *kscan_utf8_valid(PyObject *Py_UNUSED(module), PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    size_t ok;
    Py_BEGIN_ALLOW_THREADS
    ok = utf8_valid_prefix((cptr)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    int valid = ok == (size_t)view.len;
    PyBuffer_Release(&view);
    return PyBool_FromLong(valid);
}

static PyMethodDef module_methods[] = {
    {"utf8_valid", (PyCFunction)kscan_utf8_valid, METH_O,
     "utf8_valid(data) -> bool: whether every byte of data is valid UTF-8 (as Python's strict "
     "decoder judges). Runs without the GIL."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------------ the Column type */

/* One column's buffer handed over by take(): it owns the memory (read-only buffer protocol;
 * numpy and polars use it without a copy) and frees it when the last user is gone. */
typedef struct {
    PyObject_HEAD
    Buf buf;
} ColumnObject;

static PyTypeObject ColumnType;

static void column_dealloc(ColumnObject *self)
{
    buf_free(&self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int column_getbuffer(ColumnObject *self, Py_buffer *view, int flags)
{
    static char empty[1];
    char *data = self->buf.data ? self->buf.data : empty;
    return PyBuffer_FillInfo(view, (PyObject *)self, data, (Py_ssize_t)self->buf.len, 1, flags);
}

static Py_ssize_t column_len(ColumnObject *self)
{
    return (Py_ssize_t)self->buf.len;
}

static PyBufferProcs column_as_buffer = {
    .bf_getbuffer = (getbufferproc)column_getbuffer,
};

static PySequenceMethods column_as_sequence = {
    .sq_length = (lenfunc)column_len,
};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pipeaudit.trace._kscan.Column",
    .tp_doc = "A column's buffer, handed over by Scanner.take (read-only buffer protocol).",
    .tp_basicsize = sizeof(ColumnObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_as_sequence = &column_as_sequence,
};

/* The buffer moved into a new Column; `b` is left empty. */
static PyObject *take_column(Buf *b)
{
    ColumnObject *col = PyObject_New(ColumnObject, &ColumnType);
    if (col == NULL)
        return NULL;
    col->buf = *b;
    memset(b, 0, sizeof *b);
    return (PyObject *)col;
}

static PyObject *scanner_take(ScannerObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Scanner.take while a scan is running");
        return NULL;
    }
    Columns *c = &self->c;
    int want = self->want;
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    int bad = set_item(d, "n_events", PyLong_FromSsize_t(c->n_events)) ||
              set_item(d, "n_kept", PyLong_FromSsize_t(c->n_kept)) ||
              set_item(d, "n_memory", PyLong_FromSsize_t(c->n_mem)) ||
              set_item(d, "begin_end", PyLong_FromSsize_t(c->begin_end)) ||
              set_item(d, "strings", PyList_GetSlice(self->strings, 0, PyList_GET_SIZE(self->strings))) ||
              set_item(d, "name", take_column(&c->name)) || set_item(d, "cat", take_column(&c->cat)) ||
              set_item(d, "ts", take_column(&c->ts)) ||
              set_item(d, "ts_missing", take_column(&c->ts_missing)) ||
              set_item(d, "dur", take_column(&c->dur)) ||
              set_item(d, "dur_missing", take_column(&c->dur_missing)) ||
              set_item(d, "memory_ts", take_column(&c->mts)) ||
              set_item(d, "memory_ts_missing", take_column(&c->mts_missing));
    if (!bad && (want & WANT_TID))
        bad = set_item(d, "tid", take_column(&c->tid));
    if (!bad && (want & WANT_PID))
        bad = set_item(d, "pid", take_column(&c->pid));
    for (int i = 0; i < N_KEPT && !bad; i++) {
        if (!(want & KEPT_WANT[i]))
            continue;
        char key[64];
        bad = set_item(d, KEPT_NAMES[i], take_column(&c->arg[i]));
        snprintf(key, sizeof key, "%s_valid", KEPT_NAMES[i]);
        bad = bad || set_item(d, key, take_column(&c->arg_valid[i]));
    }
    for (int i = 0; i < 3 && !bad; i++) {
        char key[64];
        bad = set_item(d, MEM_NAMES[i], take_column(&c->mem[i]));
        snprintf(key, sizeof key, "%s_valid", MEM_NAMES[i]);
        bad = bad || set_item(d, key, take_column(&c->mem_valid[i]));
    }
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    /* the columns start again empty; the strings (and their codes) are kept */
    Buf *bufs[N_BUFS];
    columns_bufs(c, bufs);
    for (int i = 0; i < N_BUFS; i++)
        bufs[i]->len = 0;
    c->n_events = c->n_kept = c->n_mem = c->begin_end = 0;
    return d;
}

static PyObject *scanner_pending(ScannerObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->c.n_events);
}

static PyMethodDef scanner_methods[] = {
    {"scan", (PyCFunction)scanner_scan, METH_O,
     "scan(data) -> int | None: read a batch of events (complete events separated by "
     "commas) onto the columns and return its number of events; None when the batch must "
     "be decoded by msgspec (the columns are then as they were before the call)."},
    {"take", (PyCFunction)scanner_take, METH_NOARGS,
     "take() -> dict: the columns of every batch read since the last take, as buffers; the "
     "columns start again empty."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef scanner_getset[] = {
    {"pending", (getter)scanner_pending, NULL, "events read and not yet taken", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pipeaudit.trace._kscan.Scanner",
    .tp_doc = "Scanner(dropped, want): batches of Kineto trace events onto one set of columns.",
    .tp_basicsize = sizeof(ScannerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = scanner_new,
    .tp_dealloc = (destructor)scanner_dealloc,
    .tp_methods = scanner_methods,
    .tp_getset = scanner_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_kscan",
    .m_doc = "Compiled scanner from Kineto trace events to columns.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__kscan(void)
{
    init_tables();
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&ColumnType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
