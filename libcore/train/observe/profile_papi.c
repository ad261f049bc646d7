/* profile_papi — the profiler's hardware counters through PAPI (profile.events).
 * Each event is added on its own, so one that this machine cannot count (a preset
 * with no native event behind it in a VM, a disabled component, a misspelt name)
 * is reported as "n/a: <PAPI's reason>" and the others still count; nothing here
 * ever fails the run. The counters are this rank's main thread's (PAPI counts the
 * calling thread): OpenMP and BLAS worker threads are not included. A build without
 * PAPI (mk/detect.mk) checks the names the same way and reports each event n/a. */
#ifdef NEBULA_PAPI
#include <papi.h>
#else
#define PAPI_NULL (-1) /* built without PAPI (make PAPI=0, or no libpapi found): every event n/a */
#endif
#include <stdio.h>
#include <string.h>

#include "profile.h"

#ifdef NEBULA_PAPI
/* Why event code (named name) cannot be added: PAPI's error, the component's disabled
 * reason when it has one, and for a preset that this machine does not back a note. */
static void papi_reason(char *out, size_t cap, const char *name, int code, int rc)
{
    const char *extra = "";
    char comp[160] = "";
    int cidx = PAPI_get_event_component(code);
    const PAPI_component_info_t *ci = cidx >= 0 ? PAPI_get_component_info(cidx) : NULL;
    if (ci && ci->disabled) snprintf(comp, sizeof comp, " (component %.24s disabled: %.100s)", ci->name, ci->disabled_reason);
    else if (!strncmp(name, "PAPI_", 5) && PAPI_query_event(code) != PAPI_OK)
        extra = PAPI_query_event(PAPI_TOT_CYC) != PAPI_OK
                    ? " (no native event backs this preset here: the CPU exposes no hardware counters, as in most VMs)"
                    : " (no native event of this CPU backs this preset; papi_avail lists the ones it has)";
    snprintf(out, cap, "n/a: %.60s%s%s", PAPI_strerror(rc), comp, extra);
}
#endif

status train_profile_papi_init(train_profile_papi *pp, const char *events)
{
    memset(pp, 0, sizeof *pp);
    pp->eventset = PAPI_NULL;
    char list[1024];
    snprintf(list, sizeof list, "%s", events);
    for (char *rest = list, *tok; (tok = strsep(&rest, ",")) != NULL;) {  /* strsep: an empty name is one */
        while (*tok == ' ') tok++;
        size_t len = strlen(tok);
        while (len && tok[len - 1] == ' ') tok[--len] = 0;
        if (!len || len >= sizeof pp->name[0]) {
            log_error0("profile.events = '%s': event %d is %s (a comma-separated list of PAPI event names, e.g. "
                       "PAPI_TOT_CYC,perf::TASK-CLOCK; 'none' for no counters)", events, pp->n + 1,
                       len ? "longer than 63 characters" : "empty");
            return STATUS_INPUT;
        }
        if (pp->n == TRAIN_PROFILE_EVENTS_MAX) {
            log_error0("profile.events = '%s': more than %d events", events, TRAIN_PROFILE_EVENTS_MAX);
            return STATUS_INPUT;
        }
        snprintf(pp->name[pp->n], sizeof pp->name[0], "%s", tok);
        pp->slot[pp->n++] = -1;
    }
    if (pp->n == 1 && !strcmp(pp->name[0], "none")) pp->n = 0;
    if (pp->n == 0) return STATUS_OK;
#ifndef NEBULA_PAPI
    for (int e = 0; e < pp->n; e++)
        snprintf(pp->why[e], sizeof pp->why[e], "n/a: built without PAPI (rebuild with libpapi found, or PAPI=1)");
    return STATUS_OK;
#else
    int rc = PAPI_is_initialized() ? (int)PAPI_VER_CURRENT : PAPI_library_init(PAPI_VER_CURRENT);
    if (rc != (int)PAPI_VER_CURRENT) {
        for (int e = 0; e < pp->n; e++)
            snprintf(pp->why[e], sizeof pp->why[e], "n/a: PAPI_library_init: %s", rc > 0 ? "version mismatch"
                                                                                       : PAPI_strerror(rc));
        return STATUS_OK;
    }
    if ((rc = PAPI_create_eventset(&pp->eventset)) != PAPI_OK) {
        for (int e = 0; e < pp->n; e++)
            snprintf(pp->why[e], sizeof pp->why[e], "n/a: PAPI_create_eventset: %s", PAPI_strerror(rc));
        pp->eventset = PAPI_NULL;
        return STATUS_OK;
    }
    for (int e = 0; e < pp->n; e++) {
        int code = PAPI_NULL;
        if ((rc = PAPI_event_name_to_code(pp->name[e], &code)) != PAPI_OK) {
            snprintf(pp->why[e], sizeof pp->why[e], "n/a: no such event (%s)", PAPI_strerror(rc));
        } else if ((rc = PAPI_add_event(pp->eventset, code)) != PAPI_OK) {
            papi_reason(pp->why[e], sizeof pp->why[e], pp->name[e], code, rc);
        } else {
            pp->slot[e] = pp->ncounting++;
        }
    }
    if (pp->ncounting && (rc = PAPI_start(pp->eventset)) != PAPI_OK) {
        for (int e = 0; e < pp->n; e++)
            if (pp->slot[e] >= 0) snprintf(pp->why[e], sizeof pp->why[e], "n/a: PAPI_start: %s", PAPI_strerror(rc)),
                                  pp->slot[e] = -1;
        pp->ncounting = 0;
    }
    train_profile_papi_read(pp);
    memcpy(pp->last, pp->now, sizeof pp->last);
    return STATUS_OK;
#endif
}

void train_profile_papi_read(train_profile_papi *pp)
{
#ifdef NEBULA_PAPI
    if (pp->ncounting && PAPI_read(pp->eventset, pp->now) != PAPI_OK) memcpy(pp->now, pp->last, sizeof pp->now);
#else
    (void)pp;
#endif
}

void train_profile_papi_free(train_profile_papi *pp)
{
#ifdef NEBULA_PAPI
    if (pp->eventset != PAPI_NULL) {
        long long v[TRAIN_PROFILE_EVENTS_MAX];
        if (pp->ncounting) (void)PAPI_stop(pp->eventset, v);
        (void)PAPI_cleanup_eventset(pp->eventset);
        (void)PAPI_destroy_eventset(&pp->eventset);
    }
#endif
    pp->eventset = PAPI_NULL;
    pp->ncounting = 0;
}
