package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/redislane"
)

// The exit statuses of lanectl: the one table. exitCode maps every error a
// command returns to one of them. The codes from 64 on follow sysexits.h
// where one fits; none of them collides with another. `lanectl lock` exits
// with its command's own status, which may be any of these: a script that
// needs to tell them apart runs a command that avoids them.
const (
	exitOK = 0 // success; for `lock`, the command's own status

	// exitNotFound: `release --force` named an entry the backend did not
	// have (it printed what it did release).
	exitNotFound = 1

	// exitUsage (EX_USAGE): a bad flag or argument, a malformed --redis URL
	// or one naming a database the server does not have, a bad namespace, a missing `--`, a request that lanes rejects as
	// invalid (lanes.ErrInvalid), a --limit other than the one the key is
	// held with (lanes.ErrLimitMismatch), or an --id that names another
	// request (lanes.ErrIDConflict).
	exitUsage = 64

	// exitDataErr (EX_DATAERR): `batch` could not use its --tools or
	// --calls file: unreadable, not TOML or JSON, not a model response, or
	// a configuration that does not validate (conflicting limits...).
	exitDataErr = 65

	// exitUnavailable (EX_UNAVAILABLE): Redis cannot be reached
	// (lanes.ErrUnavailable).
	exitUnavailable = 69

	// exitInternal (EX_SOFTWARE): anything else; a bug in lanectl or lanes.
	exitInternal = 70

	// exitCannotListen (EX_OSERR): a server lanectl runs cannot listen on
	// its address (`dev-server --addr` in use, or not this host's).
	exitCannotListen = 71

	// exitWaitTimeout (EX_TEMPFAIL): `lock --wait` ran out before the grant
	// (lanes.ErrWaitTimeout), or `lock --try` could not be granted at once.
	// Nothing is left queued. `lock --conflict-exit-code N` makes it N.
	// Also an --id that cannot be used now (lanes.ErrIDRetired: settled
	// after a lost reply, for up to twice the TTL; kind id_retired), or
	// one another owner holds (lanes.ErrNotHolder, kind id_held: perhaps a
	// killed lanectl whose lease has not run out): try later or with
	// another id.
	exitWaitTimeout = 75

	// exitNoPerm (EX_NOPERM): Redis refused the credentials or the ACL user
	// may not run a command lanes needs (WRONGPASS, NOAUTH, NOPERM).
	exitNoPerm = 77
	// exitConfig (EX_CONFIG): Redis is set up in a way lanes refuses: a
	// maxmemory-policy that may evict its keys (redislane.ErrEvictable;
	// --allow-eviction accepts it), a namespace held by another version
	// of lanes (redislane.ErrProtocol), a Redis Cluster node spoken to as
	// one server (MOVED, ASK) or keys spread over slots (CROSSSLOT), a
	// master name no Sentinel knows, or a master_name= URL that names a
	// server that is no Sentinel.
	exitConfig = 78

	// exitLeaseLost: the lease was lost while the command ran; the command
	// was killed (lanes.ErrLeaseLost), or stopped with SIGTERM as its
	// lease's local deadline drew near, whatever status it then exited
	// with. Outside sysexits on purpose.
	exitLeaseLost = 79

	// exitLockCycle: the request would close a wait-for cycle through
	// nested calls (lanes.ErrLockCycle): it was refused at once, and
	// nothing was left queued. Outside sysexits on purpose.
	exitLockCycle = 80

	// exitCannotRun: the command was found but could not be executed.
	exitCannotRun = 126

	// exitCommandNotFound: the command was not found.
	exitCommandNotFound = 127

	// exitSignal plus N: the command was killed by signal N, or lanectl was
	// interrupted by signal N while it waited (130 SIGINT, 143 SIGTERM).
	exitSignal = 128
)

// exitCode returns the exit status for err, the result of a command.
func exitCode(err error) int {
	code, _ := classify(err)
	return code
}

// errorCode names the kind of err for scripts: the "code" of the JSON
// error object lanectl prints under --json. It stays the same when
// `lock --conflict-exit-code` changes the status.
func errorCode(err error) string {
	_, name := classify(err)
	return name
}

// exitNames names each status of the table, for errorCode.
var exitNames = map[int]string{
	exitOK:              "ok",
	exitNotFound:        "not_found",
	exitUsage:           "usage",
	exitDataErr:         "data_error",
	exitUnavailable:     "unavailable",
	exitInternal:        "internal",
	exitCannotListen:    "cannot_listen",
	exitWaitTimeout:     "wait_timeout",
	exitNoPerm:          "no_permission",
	exitConfig:          "config",
	exitLeaseLost:       "lease_lost",
	exitLockCycle:       "lock_cycle",
	exitCannotRun:       "cannot_run",
	exitCommandNotFound: "command_not_found",
}

// classify returns the exit status for err and the name of its kind.
func classify(err error) (int, string) {
	var (
		usage *usageError
		exit  *exitError
		intr  *interruptError
	)
	code := exitInternal
	switch {
	case err == nil:
		code = exitOK
	case errors.As(err, &exit):
		if exit.kind != "" {
			return exit.code, exit.kind
		}
		code = exit.code
	case errors.As(err, &intr):
		return exitSignal + int(intr.sig), "interrupted"
	case errors.As(err, &usage),
		errors.Is(err, lanes.ErrInvalid),
		errors.Is(err, lanes.ErrLimitMismatch),
		errors.Is(err, lanes.ErrIDConflict),
		noSuchDatabase(err):
		code = exitUsage
	case permissionDenied(err):
		code = exitNoPerm
	case errors.Is(err, redislane.ErrEvictable), errors.Is(err, redislane.ErrProtocol),
		errors.As(err, new(*configError)), misrouted(err) != "":
		code = exitConfig
	case errors.Is(err, lanes.ErrUnavailable):
		code = exitUnavailable
	case errors.Is(err, lanes.ErrIDRetired):
		return exitWaitTimeout, "id_retired"
	case errors.Is(err, lanes.ErrWaitTimeout):
		code = exitWaitTimeout
	case errors.Is(err, lanes.ErrLeaseLost):
		code = exitLeaseLost
	case errors.Is(err, lanes.ErrLockCycle):
		code = exitLockCycle
	}
	if name, ok := exitNames[code]; ok {
		return code, name
	}
	return code, "exit_" + strconv.Itoa(code)
}

// noSuchDatabase reports whether Redis refused the database the URL names
// (SELECT: "ERR DB index is out of range"): a mistake in the URL, not an
// unreachable server.
func noSuchDatabase(err error) bool {
	return strings.Contains(err.Error(), "DB index is out of range")
}

// permissionDenied reports whether Redis refused lanectl's credentials or
// one of its commands: WRONGPASS, NOAUTH, NOPERM, or the ACL refusal of a
// command inside a script, which Redis 7.0 reports as "ERR The user
// executing the script can't ..." and 7.2 on as "ERR ACL failure in
// script: ...".
func permissionDenied(err error) bool {
	msg := err.Error()
	for _, s := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "The user executing the script can't", "ACL failure in script"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// usageError is a mistake in the command line. showUsage asks for the
// command's usage to be printed before the one-line error: for mistakes
// cobra finds (an unknown flag or command), not for a bad value.
type usageError struct {
	msg       string
	showUsage bool
}

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError ends lanectl with a given status. With a nil err it prints
// nothing: the status says it all (a command's own exit status). kind
// names it for errorCode when code alone does not (a status chosen with
// --conflict-exit-code).
type exitError struct {
	code int
	kind string
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// interruptError reports that lanectl stopped because it received sig.
type interruptError struct {
	sig syscall.Signal
	msg string // what was interrupted; empty for the bare cause
}

func (e *interruptError) Error() string {
	if e.msg == "" {
		return "interrupted by " + signalName(e.sig)
	}
	return e.msg
}

// describe says what a lanes error is about in one sentence, without the
// "lanes: ..." prefixes of its chain: the detail of a validation error, the
// words of a lock cycle. Other errors are returned as their text.
func describe(err error) string {
	var (
		inv   *lanes.InvalidError
		cycle *lanes.LockCycleError
		conf  *lanes.IDConflictError
		lim   *lanes.LimitMismatchError
		rm    *lanes.RateMismatchError
	)
	switch {
	case errors.As(err, &inv):
		return inv.Detail
	case errors.As(err, &cycle):
		return "lock cycle: " + cycle.Path
	case errors.As(err, &conf):
		return fmt.Sprintf("entry id %s already names another request (other keys, limits, rates, costs or lineage); an entry id names one request: choose another --id", conf.ID)
	case errors.As(err, &lim):
		// MaxLimit is what a lane bounded by its rate alone is sent with.
		switch {
		case lim.Recorded == lanes.MaxLimit:
			return fmt.Sprintf("key %q is held or awaited with no concurrency limit (a rate alone bounds it); this request names limit %d (pass its holders' --rate and no --limit: lanectl status %s shows the rate)", lim.Key, lim.Requested, lim.Key)
		case lim.Requested == lanes.MaxLimit:
			return fmt.Sprintf("key %q is held or awaited with limit %d; this request names none (a rate alone) (pass --limit %d, and --rate only if lanectl status %s shows one)", lim.Key, lim.Recorded, lim.Recorded, lim.Key)
		}
		return fmt.Sprintf("key %q is held or awaited with limit %d; this request names %d (pass --limit %d)", lim.Key, lim.Recorded, lim.Requested, lim.Recorded)
	case errors.As(err, &rm):
		if rm.Recorded.IsZero() {
			return fmt.Sprintf("key %q is in use without a rate; this request names rate %s (leave --rate out)", rm.Key, rm.Requested)
		}
		return fmt.Sprintf("key %q is in use with rate %s; this request names %s (pass --rate %s)", rm.Key, rm.Recorded, rateOrNone(rm.Requested), rm.Recorded)
	}
	return err.Error()
}

func rateOrNone(r lanes.Rate) string {
	if r.IsZero() {
		return "none"
	}
	return r.String()
}
