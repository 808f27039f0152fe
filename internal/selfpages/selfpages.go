// Package selfpages gives the kernel back the pages of this process's own
// executable that it holds resident but no longer uses.
//
// A Go binary's code and read-only data are mapped from its file. Start-up
// touches much of them once (package initialisation, the first run of every
// check), and the kernel maps file pages in large pieces: a freshly written
// or unpacked binary sits in the page cache as large folios, each mapped
// whole on its first touch, and a cold one is read ahead 128 KiB at a time.
// So a node agent that uses a few MiB of its code in steady state shows its
// whole 25 MB binary resident. Paging those mappings out once start-up is
// over (madvise MADV_PAGEOUT) leaves resident only what is touched again:
// clean file pages, reclaimed only where no other process maps them, read
// back from the page cache or the disk on their next use.
package selfpages
