/* Ctrl-C (and any Python signal handler) during a long kernel call.
 *
 * The loops run without the GIL, so Python cannot run its signal handlers until the call returns.
 * Instead, the thread that made the call polls: at most every FC_POLL_SECONDS, between tasks, it
 * takes the GIL and runs PyErr_CheckSignals().  When a handler raises (KeyboardInterrupt for
 * SIGINT), the exception is kept here and `stop` is set; every thread then skips its remaining
 * tasks, and the driver re-raises the exception once the parallel region has ended.  Outputs are
 * fresh arrays that are dropped; inputs are never written, so nothing is left half-done.
 *
 * One fc_interrupt per call (never global: two Python threads may run kernels at once). */
#ifndef FC_INTERRUPT_H
#define FC_INTERRUPT_H

#include <Python.h>
#include <pthread.h>
#include <time.h>

#define FC_POLL_SECONDS 0.02

typedef struct {
    int stop;           /* read by every thread, written once by the owner (relaxed atomics) */
    int can_poll;       /* the call came from Python's main thread, the only one that runs handlers */
    pthread_t owner;
    double next_poll;
    PyObject *type, *value, *tb;
} fc_interrupt;

static inline double fc_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* With the GIL, before the loops start. */
static inline void fc_interrupt_init(fc_interrupt* it, int is_main_thread)
{
    it->stop = 0;
    it->can_poll = is_main_thread;
    it->owner = pthread_self();
    it->next_poll = fc_monotonic() + FC_POLL_SECONDS;
    it->type = it->value = it->tb = NULL;
}

/* From any thread, without the GIL: 1 when the call must stop.  Only the owner polls; the clock
 * read is the only cost on the common path (tens of ns, once per task). */
static inline int fc_stopped(fc_interrupt* it)
{
    double now;
    PyGILState_STATE g;
    if (__atomic_load_n(&it->stop, __ATOMIC_RELAXED))
        return 1;
    if (!it->can_poll || !pthread_equal(pthread_self(), it->owner))
        return 0;
    now = fc_monotonic();
    if (now < it->next_poll)
        return 0;
    it->next_poll = now + FC_POLL_SECONDS;
    g = PyGILState_Ensure();
    if (PyErr_CheckSignals() < 0) {
        PyErr_Fetch(&it->type, &it->value, &it->tb);
        __atomic_store_n(&it->stop, 1, __ATOMIC_RELAXED);
    }
    PyGILState_Release(g);
    return __atomic_load_n(&it->stop, __ATOMIC_RELAXED);
}

/* With the GIL, after the loops: re-raise a handler's exception (returns -1), else 0. */
static inline int fc_interrupt_raise(fc_interrupt* it)
{
    if (!it->stop)
        return 0;
    PyErr_Restore(it->type, it->value, it->tb);
    it->type = it->value = it->tb = NULL;
    return -1;
}

#endif
