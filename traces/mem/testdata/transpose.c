/* A small real program recorded for tracebed's embedded sample
 * traces/mem/samples/transpose.memtrace: a naive out-of-place transpose of a
 * 128x128 matrix of doubles (128 KiB each, 32 pages), done twice, so that the
 * column-order writes stride across pages. Recorded with
 *   gcc -O1 -o transpose transpose.c
 *   valgrind --tool=lackey --trace-mem=yes --log-file=transpose.lackey ./transpose
 * and imported with memtrace.ImportLackey (default options).
 */
#include <stdlib.h>
#define N 128
int main(void) {
	double *a = malloc(N * N * sizeof *a), *b = malloc(N * N * sizeof *b);
	if (!a || !b)
		return 2;
	for (int i = 0; i < N * N; i++)
		a[i] = i;
	for (int rep = 0; rep < 2; rep++)
		for (int i = 0; i < N; i++)
			for (int j = 0; j < N; j++)
				b[j * N + i] = a[i * N + j] + rep;
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			if (b[j * N + i] != a[i * N + j] + 1)
				return 1;
	free(a);
	free(b);
	return 0;
}
