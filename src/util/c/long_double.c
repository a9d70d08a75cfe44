/*
 * The C `long double` arithmetic of INCRBYFLOAT and HINCRBYFLOAT (src/util/long_double.rs).
 *
 * Redis parses these operands with strtold, adds them as `long double` (80-bit x87
 * extended precision on x86-64) and prints the sum with "%.17Lf". Rust has no
 * such type; the replies differ from Redis's in the last digits (and in every digit
 * near 2^63) unless the same arithmetic and the same libc formatting are used, so
 * this file does exactly those steps and nothing else. Values cross the boundary as
 * the 16 bytes of their storage.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

typedef struct { unsigned char bytes[16]; } tessera_ld;
_Static_assert(sizeof(long double) <= 16, "a long double fits the 16 bytes Rust holds");

static long double ld_get(const tessera_ld *v) {
    long double x;
    memcpy(&x, v->bytes, sizeof(x));
    return x;
}

static void ld_put(tessera_ld *v, long double x) {
    memset(v->bytes, 0, sizeof(v->bytes));
    memcpy(v->bytes, &x, sizeof(x));
}

/* `len` bytes at `s` (NUL-terminated at s[len] by the caller) as strtold reads them,
 * refused as Redis's string2ld refuses: leading space, trailing bytes, NaN, and an
 * overflow or an underflow to zero. Returns 1 and stores the value, else 0. */
int tessera_ld_parse(const char *s, size_t len, tessera_ld *out) {
    char *end;
    long double x;
    if (len == 0 || isspace((unsigned char)s[0])) return 0;
    errno = 0;
    x = strtold(s, &end);
    if (*end != '\0' || (size_t)(end - s) != len) return 0;
    if (errno == ERANGE && (x == HUGE_VALL || x == -HUGE_VALL || fpclassify(x) == FP_ZERO))
        return 0;
    if (errno == EINVAL || isnan(x)) return 0;
    ld_put(out, x);
    return 1;
}

void tessera_ld_from_i64(long long n, tessera_ld *out) {
    ld_put(out, (long double)n);
}

void tessera_ld_add(const tessera_ld *a, const tessera_ld *b, tessera_ld *out) {
    ld_put(out, ld_get(a) + ld_get(b));
}

/* 1 when NaN or infinite. */
int tessera_ld_nan_or_inf(const tessera_ld *v) {
    long double x = ld_get(v);
    return isnan(x) || isinf(x);
}

/* "%.17Lf" into buf (len bytes): the length it needs, as snprintf returns it. */
int tessera_ld_format_fixed17(const tessera_ld *v, char *buf, size_t len) {
    return snprintf(buf, len, "%.17Lf", ld_get(v));
}
