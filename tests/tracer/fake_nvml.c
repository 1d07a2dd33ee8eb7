/* A stand-in for libnvidia-ml.so.1 (the tracer asks NVML for the driver's version where
 * /proc/driver/nvidia/version does not say it): nvmlInit_v2 takes FAKE_NVML_INIT_MS milliseconds,
 * as a slow real one can, and the version is FAKE_NVML_VERSION. For the test that checks that no
 * thread of the recorded program waits for NVML (cpu_attach_signal_test.cc). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

int nvmlInit_v2(void) {
  const char* ms = getenv("FAKE_NVML_INIT_MS");
  long wait = ms != NULL ? atol(ms) : 0;
  struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};
  nanosleep(&ts, NULL);
  return 0;
}

int nvmlSystemGetDriverVersion(char* version, unsigned length) {
  const char* v = getenv("FAKE_NVML_VERSION");
  if (v == NULL) v = "0.0.0";
  if (length == 0 || strlen(v) >= length) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
  strcpy(version, v);
  return 0;
}

int nvmlShutdown(void) { return 0; }
