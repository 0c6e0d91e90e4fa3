/* Megatron iteration lines of the usual layout, read from a block of a log's bytes in one pass.

   ingest/megatron_scan.py holds the contract; in short: a line is read here only when this code reaches
   exactly the numbers polars reaches through megatron.py's _USUAL_START and _LOSS_MATCH (and no other part of
   megatron.py would read the line: no memory report, no tokens per second, no banner, no argument line).
   Every other line, and every line this code is unsure of (non-ASCII, a carriage return but a \r\n line's, a number in an
   unusual spelling), is handed back as text for the polars path. So the two paths cannot disagree on a
   line: the hard cases all go one way.

   polars' regex extracts of these fields, as strings then cast, cost ~0.7 us a line (1.5 s of CPU per 2M lines);
   this reads each byte once and converts each number where it finds it: 0.2 us a line. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buffer; /* a growing byte array, handed to Python as bytes at the end */

static int reserve(Buffer *b, Py_ssize_t n)
{
    if (b->len + n <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n)
        cap *= 2;
    char *grown = PyMem_Realloc(b->data, (size_t)cap);
    if (grown == NULL)
        return -1;
    b->data = grown;
    b->cap = cap;
    return 0;
}

static int put(Buffer *b, const void *src, Py_ssize_t n)
{
    if (reserve(b, n))
        return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

/* One 8-byte value (a fixed-size copy the compiler writes as one move, not a call to memcpy). */
#define PUT8(b, value) (reserve((b), 8) ? -1 : (memcpy((b)->data + (b)->len, &(value), 8), (b)->len += 8, 0))

static PyObject *take(Buffer *b)
{
    PyObject *out = PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    return out;
}

/* ASCII \s without \n (never inside a line) and \r (a line holding one goes to the polars path). */
static inline int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }
static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static inline int starts(const char *p, const char *end, const char *word, size_t n)
{
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0;
}
#define STARTS(p, end, lit) starts((p), (end), (lit), sizeof(lit) - 1)

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The double nearest the decimal [p, end): `[+-]?digits(.digits)?([eE][+-]?digits)?`, already checked.
   Clinger's fast path where it is exact (at most 15 significant digits, a power of ten up to 1e22: one
   correctly rounded multiply or divide of two exact doubles), else CPython's correctly rounded dtoa. Both
   give the nearest double, as polars' cast does. 0: too long to copy for dtoa (the polars path reads it). */
static int to_double(const char *p, const char *end, double *out)
{
    const char *s = p;
    int negative = 0;
    if (*s == '+' || *s == '-')
        negative = *s++ == '-';
    uint64_t mantissa = 0;
    int digits = 0, scale = 0;
    for (; s < end && is_digit((unsigned char)*s); s++) {
        if (mantissa || *s != '0') {
            mantissa = mantissa * 10 + (uint64_t)(*s - '0');
            digits++;
        }
        if (digits > 15)
            goto slow;
    }
    if (s < end && *s == '.') {
        for (s++; s < end && is_digit((unsigned char)*s); s++) {
            if (mantissa || *s != '0') {
                mantissa = mantissa * 10 + (uint64_t)(*s - '0');
                digits++;
            }
            scale--;
            if (digits > 15)
                goto slow;
        }
    }
    if (s < end) { /* [eE][+-]?digits */
        s++;
        int exp_negative = 0, exponent = 0;
        if (*s == '+' || *s == '-')
            exp_negative = *s++ == '-';
        for (; s < end; s++) {
            if (exponent > 9999)
                goto slow;
            exponent = exponent * 10 + (*s - '0');
        }
        scale += exp_negative ? -exponent : exponent;
    }
    double value = (double)mantissa; /* exact: below 10^15 < 2^53 */
    if (mantissa == 0)
        value = 0.0;
    else if (scale >= 0 && scale <= 22)
        value = value * POW10[scale];
    else if (scale < 0 && scale >= -22)
        value = value / POW10[-scale];
    else
        goto slow;
    *out = negative ? -value : value;
    return 1;
slow:;
    char copy[64];
    Py_ssize_t n = end - p;
    if (n >= (Py_ssize_t)sizeof copy)
        return 0;
    memcpy(copy, p, (size_t)n);
    copy[n] = '\0';
    char *stop = NULL;
    double value_dtoa = PyOS_string_to_double(copy, &stop, NULL); /* a checked decimal: no error to raise */
    if (stop != copy + n) {
        PyErr_Clear();
        return 0;
    }
    *out = value_dtoa;
    return 1;
}

/* [p, end) is `digits(.digits)?`: what the cast reads exactly as C does (polars' reading of "5." or "1.2.3"
   is left to polars). */
static int plain_decimal(const char *p, const char *end)
{
    const char *s = p;
    while (s < end && is_digit((unsigned char)*s))
        s++;
    if (s == p)
        return 0;
    if (s == end)
        return 1;
    if (*s++ != '.' || s == end)
        return 0;
    while (s < end && is_digit((unsigned char)*s))
        s++;
    return s == end;
}

/* [p, end) is `[+-]?digits(.digits)?([eE][+-]?digits)?`. */
static int plain_float(const char *p, const char *end)
{
    const char *s = p;
    if (s < end && (*s == '+' || *s == '-'))
        s++;
    const char *mark = s;
    while (s < end && *s != 'e' && *s != 'E')
        s++;
    if (!plain_decimal(mark, s))
        return 0;
    if (s == end)
        return 1;
    s++;
    if (s < end && (*s == '+' || *s == '-'))
        s++;
    if (s == end)
        return 0;
    for (; s < end; s++)
        if (!is_digit((unsigned char)*s))
            return 0;
    return 1;
}

/* `[0-9]+` from *p: its end, or NULL when there is none. */
static const char *digits(const char *p, const char *end)
{
    const char *s = p;
    while (s < end && is_digit((unsigned char)*s))
        s++;
    return s == p ? NULL : s;
}

static const char *spaces(const char *p, const char *end)
{
    while (p < end && is_space((unsigned char)*p))
        p++;
    return p;
}

/* `\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]` at p (megatron.py's start time), ASCII digits. */
static int stamp_at(const char *p, const char *end)
{
    static const char shape[] = "[dddd-dd-dd dd:dd:dd]";
    if (end - p < (Py_ssize_t)sizeof shape - 1)
        return 0;
    for (size_t i = 0; i < sizeof shape - 1; i++)
        if (shape[i] == 'd' ? !is_digit((unsigned char)p[i]) : p[i] != shape[i])
            return 0;
    return 1;
}

/* Where in [p, end) read_line must look next: a byte that may begin (or, for the words found by a rare byte
   inside them, lie in) what it looks for, or one it leaves to polars (a carriage return, anything outside ASCII).
   A prefilter: it may stop where nothing is (read_line checks each stop), never pass over what is. `| l` stands
   for `| lm loss: `, wanted until the loss is read; `..` for ARG_LINE's ` .. `. */
static inline int stops_at(const char *p, const char *end, int want_loss)
{
    unsigned char c = (unsigned char)*p;
    return c >= 0x80 || c == '\r' || c == '[' || c == '(' || c == 'k' || c == 'w' ||
           (c == '.' && end - p > 1 && p[1] == '.') ||
           (want_loss && c == '|' && end - p > 2 && p[1] == ' ' && p[2] == 'l');
}

static const char *next_stop(const char *p, const char *end, int want_loss)
{
#if defined(__SSE2__)
    /* 16 bytes a step: the compares of stops_at, side by side (most lines hold a dozen stops in 200 bytes) */
    const __m128i cr = _mm_set1_epi8('\r'), bracket = _mm_set1_epi8('['), paren = _mm_set1_epi8('('),
                  kay = _mm_set1_epi8('k'), double_u = _mm_set1_epi8('w'), dot = _mm_set1_epi8('.'),
                  bar = _mm_set1_epi8('|'), space = _mm_set1_epi8(' '), ell = _mm_set1_epi8('l');
    while (end - p >= 18) { /* the loads at p + 1 and p + 2 stay inside */
        __m128i v0 = _mm_loadu_si128((const __m128i *)p), v1 = _mm_loadu_si128((const __m128i *)(p + 1));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v0, cr), _mm_cmpeq_epi8(v0, bracket)),
                                   _mm_or_si128(_mm_cmpeq_epi8(v0, paren), _mm_cmpeq_epi8(v0, kay)));
        hit = _mm_or_si128(hit, _mm_or_si128(_mm_cmpeq_epi8(v0, double_u),
                                             _mm_and_si128(_mm_cmpeq_epi8(v0, dot), _mm_cmpeq_epi8(v1, dot))));
        if (want_loss) {
            __m128i v2 = _mm_loadu_si128((const __m128i *)(p + 2));
            hit = _mm_or_si128(hit, _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(v0, bar), _mm_cmpeq_epi8(v1, space)),
                                                  _mm_cmpeq_epi8(v2, ell)));
        }
        int mask = _mm_movemask_epi8(hit) | _mm_movemask_epi8(v0); /* v0's high bits: bytes outside ASCII */
        if (mask)
            return p + __builtin_ctz((unsigned)mask);
        p += 16;
    }
#endif
    while (p < end && !stops_at(p, end, want_loss))
        p++;
    return p;
}

typedef struct {
    int64_t step;
    double samples, tokens, step_ms, loss;
    uint8_t has_tokens, has_loss, stamped;
} Row;

static const double NOT_A_NUMBER = __builtin_nan("");

/* The usual layout's row of [p, end), or 0: the line is the polars path's. */
static int read_line(const char *p, const char *end, Row *row)
{
    const char *line = p, *g, *q;
    row->stamped = 0;
    /* ^\s*(?:\[[0-9: -]+\]\s*)?iteration\s+([0-9]+)/\s*([0-9]+) \| consumed samples:\s+([0-9]+) \| */
    p = spaces(p, end);
    if (p < end && *p == '[') { /* the start time, if any, is here: no other '[' fits before the rest */
        row->stamped = stamp_at(p, end);
        q = p + 1;
        while (q < end && (is_digit((unsigned char)*q) || *q == ':' || *q == ' ' || *q == '-'))
            q++;
        if (q == p + 1 || q == end || *q != ']')
            return 0;
        p = spaces(q + 1, end);
    }
    if (!STARTS(p, end, "iteration"))
        return 0;
    q = spaces(p + 9, end);
    if (q == p + 9 || (g = digits(q, end)) == NULL || g - q > 18 || g == end || *g != '/')
        return 0;
    row->step = 0;
    for (; q < g; q++)
        row->step = row->step * 10 + (*q - '0');
    q = spaces(g + 1, end);
    if ((g = digits(q, end)) == NULL || !STARTS(g, end, " | consumed samples:"))
        return 0;
    q = g + sizeof(" | consumed samples:") - 1;
    p = spaces(q, end);
    if (p == q || (g = digits(p, end)) == NULL || !STARTS(g, end, " | ") || !to_double(p, g, &row->samples))
        return 0;
    p = g + 3;
    /* (?:consumed tokens:\s+([0-9]+) \| )? */
    row->has_tokens = 0;
    if (STARTS(p, end, "consumed tokens:")) {
        q = p + sizeof("consumed tokens:") - 1;
        p = spaces(q, end);
        if (p == q || (g = digits(p, end)) == NULL || !STARTS(g, end, " | ") || !to_double(p, g, &row->tokens))
            return 0;
        row->has_tokens = 1;
        p = g + 3;
    }
    /* elapsed time per iteration \(ms\): ([0-9.]+) */
    if (!STARTS(p, end, "elapsed time per iteration (ms): "))
        return 0;
    p += sizeof("elapsed time per iteration (ms): ") - 1;
    for (g = p; g < end && (is_digit((unsigned char)*g) || *g == '.'); g++)
        ;
    if (!plain_decimal(p, g) || !to_double(p, g, &row->step_ms))
        return 0;

    /* The rest of the line: the loss, and whatever would make another part of megatron.py read it. */
    row->has_loss = 0;
    for (p = g; p < end; p++) {
        p = next_stop(p, end, !row->has_loss);
        if (p == end)
            break;
        unsigned char c = (unsigned char)*p;
        if (c >= 0x80 || c == '\r')
            return 0; /* Unicode classes, the \r clean-up: polars' */
        switch (c) {
        case '|':
            if (!row->has_loss && STARTS(p, end, "| lm loss: ")) {
                /* \| lm loss: (?:[-+0-9.eE]+|nan|inf), its first match in the line */
                const char *t = p + sizeof("| lm loss: ") - 1, *u = t;
                while (u < end && (is_digit((unsigned char)*u) || *u == '-' || *u == '+' || *u == '.' ||
                                   *u == 'e' || *u == 'E'))
                    u++;
                if (u > t) {
                    if (!plain_float(t, u) || !to_double(t, u, &row->loss))
                        return 0;
                } else if (STARTS(t, end, "nan")) {
                    row->loss = NOT_A_NUMBER;
                } else if (STARTS(t, end, "inf")) {
                    row->loss = __builtin_inf();
                } else {
                    return 0; /* the pattern's first match is further on */
                }
                row->has_loss = 1;
            }
            break;
        case '[':
            if (stamp_at(p, end))
                row->stamped = 1;
            break;
        case '.': /* ARG_LINE's ` .. ` */
            if (p[-1] == ' ' && p + 1 < end && p[1] == '.')
                return 0;
            break;
        /* The words below are found by a rare byte inside them, looked back from: a common first letter
           (t, m, u, c) would stop next_stop at every label. */
        case '(':
            if (p - line >= 7 && STARTS(p - 7, end, "memory (MB)"))
                return 0;
            break;
        case 'k':
            if (p - line >= 2 && STARTS(p - 2, end, "tokens per "))
                return 0;
            /* tokens printed further on: the polars path reads such a line field by field */
            if (!row->has_tokens && p - line >= 11 && STARTS(p - 11, end, "consumed tokens:"))
                return 0;
            break;
        case 'w':
            if (p - line >= 6 && STARTS(p - 6, end, "using world size: "))
                return 0;
            break;
        }
    }
    return 1;
}

#define COLUMNS 9

PyDoc_STRVAR(scan_doc,
"scan(block, first_line, last_as_text) -> (n_lines, line, step, samples, tokens, step_ms, loss, has_loss,\n"
"    starts, ends, stamped, other_text, other_line)\n\n"
"The lines of `block` (whole lines of a log; the first is line `first_line`) of the usual Megatron layout, as\n"
"packed columns (int64 line, step, starts and ends (byte offsets of the line in the block); float64 samples,\n"
"tokens (NaN: not printed), step_ms, loss; uint8 has_loss), the index of the first such row holding a start\n"
"time (-1: none), and every other line: their text, each ended by a newline, and their int64 line numbers.\n"
"`last_as_text`: the block's last line goes with the other lines whatever it holds.");

static PyObject *scan(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    long long first_line;
    int last_as_text;
    if (!PyArg_ParseTuple(args, "y*Lp", &view, &first_line, &last_as_text))
        return NULL;
    const char *block = view.buf, *end = block + view.len;
    Buffer column[COLUMNS] = {{0}}; /* line, step, samples, tokens, step_ms, loss, has_loss, starts, ends */
    Buffer other_text = {0}, other_line = {0};
    int64_t n_lines = 0, n_rows = 0, stamped = -1;
    int failed = 0;
    const char *p = block;
    while (p < end && !failed) {
        const char *newline = memchr(p, '\n', (size_t)(end - p));
        const char *stop = newline ? newline : end;
        /* A \r\n line's text is the line without its \r (textlog strips trailing ones): read without it. Any
           other \r (two at the end, a progress bar's) stays in the line, which read_line leaves to polars. */
        const char *text_end = stop > p && stop[-1] == '\r' ? stop - 1 : stop;
        int64_t number = first_line + n_lines++;
        int is_last = newline == NULL || newline + 1 == end;
        Row row;
        if (!(last_as_text && is_last) && read_line(p, text_end, &row)) {
            int64_t start = p - block, finish = text_end - block;
            uint8_t has_loss = row.has_loss;
            double tokens = row.has_tokens ? row.tokens : NOT_A_NUMBER, loss = row.has_loss ? row.loss : 0.0;
            failed = PUT8(&column[0], number) || PUT8(&column[1], row.step) || PUT8(&column[2], row.samples) ||
                     PUT8(&column[3], tokens) || PUT8(&column[4], row.step_ms) || PUT8(&column[5], loss) ||
                     put(&column[6], &has_loss, 1) || PUT8(&column[7], start) || PUT8(&column[8], finish);
            if (row.stamped && stamped < 0)
                stamped = n_rows;
            n_rows++;
        } else {
            failed = put(&other_text, p, stop - p) || put(&other_text, "\n", 1) || PUT8(&other_line, number);
        }
        p = newline ? newline + 1 : end;
    }
    PyBuffer_Release(&view);
    if (failed) {
        for (int i = 0; i < COLUMNS; i++)
            PyMem_Free(column[i].data);
        PyMem_Free(other_text.data);
        PyMem_Free(other_line.data);
        return PyErr_NoMemory();
    }
    PyObject *out = PyTuple_New(13);
    if (out == NULL)
        return NULL;
    PyTuple_SET_ITEM(out, 0, PyLong_FromLongLong(n_lines));
    for (int i = 0; i < 9; i++)
        PyTuple_SET_ITEM(out, 1 + i, take(&column[i]));
    PyTuple_SET_ITEM(out, 10, PyLong_FromLongLong(stamped));
    PyTuple_SET_ITEM(out, 11, take(&other_text));
    PyTuple_SET_ITEM(out, 12, take(&other_line));
    for (int i = 0; i < 13; i++)
        if (PyTuple_GET_ITEM(out, i) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_megatron_lines",
    "Megatron iteration lines of the usual layout, read in native code (ingest/megatron_scan.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__megatron_lines(void)
{
    return PyModule_Create(&module);
}
