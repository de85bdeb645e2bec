/* Recorded by TestLackeyRecordsRealProgram when valgrind and gcc are installed:
 * 64 pages written in order, then read in order. */
#include <stdlib.h>
#define PAGES 64
#define PAGE 4096
int main(void) {
	volatile char *buf = malloc(PAGES * PAGE);
	long sum = 0;
	if (!buf)
		return 2;
	for (int p = 0; p < PAGES; p++)
		buf[(long)p * PAGE] = (char)p;
	for (int p = 0; p < PAGES; p++)
		sum += buf[(long)p * PAGE];
	return sum == (PAGES - 1) * PAGES / 2 ? 0 : 1;
}
