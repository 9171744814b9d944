/* A Windows service standing in for AKS's NSSM service `Kubelet` in the
 * node-install tests under Wine (tests/windows.rs): it registers with the
 * Service Control Manager as the real one does, appends "start" to the
 * file named by its first argument each time it starts, and stops when
 * asked. Health is answered by the test itself (its /healthz server), so
 * a test decides whether "the kubelet" came back. Built by
 * tests/windows/setup.sh with mingw-w64; used only in tests. */
#include <windows.h>
#include <stdio.h>

static SERVICE_STATUS_HANDLE handle;
static SERVICE_STATUS status;
static HANDLE stopped;
static char log_path[MAX_PATH];

static void report(DWORD state) {
    status.dwServiceType = SERVICE_WIN32_OWN_PROCESS;
    status.dwCurrentState = state;
    status.dwControlsAccepted = state == SERVICE_RUNNING ? SERVICE_ACCEPT_STOP : 0;
    SetServiceStatus(handle, &status);
}

static DWORD WINAPI control(DWORD code, DWORD type, LPVOID data, LPVOID context) {
    (void)type; (void)data; (void)context;
    if (code == SERVICE_CONTROL_STOP) {
        report(SERVICE_STOP_PENDING);
        SetEvent(stopped);
    }
    return NO_ERROR;
}

static void WINAPI service_main(DWORD argc, LPSTR *argv) {
    (void)argc; (void)argv;
    handle = RegisterServiceCtrlHandlerExA("Kubelet", control, NULL);
    stopped = CreateEventA(NULL, TRUE, FALSE, NULL);
    report(SERVICE_START_PENDING);
    FILE *log = fopen(log_path, "a");
    if (log) {
        fputs("start\n", log);
        fclose(log);
    }
    report(SERVICE_RUNNING);
    WaitForSingleObject(stopped, INFINITE);
    report(SERVICE_STOPPED);
}

int main(int argc, char **argv) {
    if (argc > 1)
        lstrcpynA(log_path, argv[1], MAX_PATH);
    SERVICE_TABLE_ENTRYA table[] = {{"Kubelet", service_main}, {NULL, NULL}};
    return StartServiceCtrlDispatcherA(table) ? 0 : 1;
}
