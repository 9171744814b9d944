/*
 * bcryptprimitives.dll for Wine before 8.13, which lacks it: Rust's std
 * (1.78 and later) imports ProcessPrng from it on Windows, so a Rust .exe
 * does not load under Debian bookworm's wine 8.0 without this shim. Built
 * by tests/windows/setup.sh with mingw-w64 and placed beside the .exe
 * under test only; never shipped. ProcessPrng fills a buffer with random
 * bytes and always succeeds; advapi32's SystemFunction036 (RtlGenRandom)
 * does the same on every Windows and Wine version.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
