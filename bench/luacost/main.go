// Command luacost counts the machine instructions Redis spends in the lanes
// scripts for a few common steps, on a redis-server of its own run under
// valgrind's callgrind. Unlike a timing, the count does not move with the
// load of the machine (two runs agree within about 2%), so two versions of the scripts
// can be compared on a busy 2-core machine, and a change of a few percent
// is seen.
//
//	go run ./luacost                 # the scripts of this checkout
//	go run ./luacost -base c0679bf   # and those of another commit, side by side
//
// Each scenario runs the scripts inside one EVAL: lib.lua, then enqueue.lua,
// release.lua and heartbeat.lua as local functions with the KEYS and ARGV
// of docs/PROTOCOL.md, then a driver that calls them in a loop (a setup
// EVAL first, not counted). Every server command the scripts run is
// counted, as in a real step; what a step costs outside the script (the
// network, the FCALL's parsing, the reply) is not, and neither is the
// EVAL's own (its SHA1 of the source, a few thousand instructions per op
// at most). SCRIPT FLUSH comes before each scenario, so that every count
// starts from the same Lua heap.
//
// It needs valgrind (callgrind_control) and redis-server on PATH, or
// -redis-server. Debian's redis-server has no symbols; for a profile by
// function, build Redis from source and pass its binary.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scenario is one kind of step: setup (not counted) and run (counted) are
// Lua drivers that call ENQ, REL and HB; ops is what run does, the divisor.
type scenario struct {
	name, what string
	setup, run string
	ops        int
}

var scenarios = []scenario{
	{
		name: "acquire+release", what: "one uncontended acquire and release of a new key (lean paths)", ops: 500,
		run: acquireRelease(`'k'..R..i`),
	},
	{
		name: "acquire+release, one key", what: "the same, always on one key (the bench's uncontended cell)", ops: 500,
		run: acquireRelease(`'k'`),
	},
	{
		name: "acquire+release, 64 keys", what: "the same, on 64 keys used in turn (their records stay)", ops: 500,
		run: acquireRelease(`'k'..(i % 64)`),
	},
	{
		name: "batch of 30", what: "per request: enqueue steps of 30 requests on new keys, then release steps of their 30 ids", ops: 600,
		run: `for b=1,20 do
  local reqs, ids = {}, {P,'h:','o1','0'}
  for i=1,30 do reqs[i] = '{"id":"e'..R..b..'-'..i..'","k":[["k'..R..b..'-'..i..'",1]]}'; ids[#ids+1] = 'e'..R..b..'-'..i end
  local x = ENQ(KEYS, {P,'h:', '30000', 'o1', 'host', '1', '['..table.concat(reqs, ',')..']'})
  if type(x) ~= 'table' then return x end
  x = REL(KEYS, ids)
  if type(x) ~= 'table' then return x end
end`,
	},
	{
		name: "release with a waiter", what: "a holder's release that grants the one waiter behind it (hand-off)", ops: 200,
		setup: `for i=1,200 do
  ENQ(KEYS, {P,'h:', '600000', 'holder', 'host', '1', '[{"id":"h'..R..i..'","k":[["k'..R..i..'",1]]}]'})
  ENQ(KEYS, {P,'h:', '600000', 'waiter', 'host', '1', '[{"id":"w'..R..i..'","k":[["k'..R..i..'",1]]}]'})
end`,
		run: `for i=1,200 do
  local x = REL(KEYS, {P,'h:','holder','0','h'..R..i})
  if type(x) ~= 'table' or WAS1(x) ~= 'h' or NGRANT(x, 1) ~= 1 then return x end
end`,
	},
	{
		name: "enqueue behind a holder", what: "a request queued behind the holder of its key (the contended enqueue)", ops: 200,
		setup: `for i=1,200 do
  ENQ(KEYS, {P,'h:', '600000', 'holder', 'host', '1', '[{"id":"h'..R..i..'","k":[["k'..R..i..'",1]]}]'})
end`,
		run: `for i=1,200 do
  local x = ENQ(KEYS, {P,'h:', '600000', 'waiter', 'host', '1', '[{"id":"w'..R..i..'","k":[["k'..R..i..'",1]]}]'})
  if type(x) ~= 'table' or ST1(x) ~= 'w' then return x end
end`,
	},
	{
		name: "release of waiters", what: "per id: 1,000 waiters behind a holder released in steps of 250 (Session.Close)", ops: 1000,
		setup: waiters1000,
		run: `for b=0,3 do
  local a = {P,'h:','o1','0'}
  for i=1,250 do a[#a+1] = 'w'..R..'-'..(b*250+i) end
  local x = REL(KEYS, a)
  if type(x) ~= 'table' or WAS1(x) ~= 'w' then return x end
end`,
	},
	{
		name: "heartbeat of waiters", what: "per id: heartbeats of 1,000 waiters in steps of 250", ops: 1000,
		setup: waiters1000,
		run: `for b=0,3 do
  local a = {P,'h:','600000','o1'}
  for i=1,250 do a[#a+1] = 'w'..R..'-'..(b*250+i) end
  local x = HB(KEYS, a)
  if type(x) ~= 'table' or ST1(x) ~= 'w' then return x end
end`,
	},
	{
		name: "enqueue 1,000 on one key", what: "per request: one step of 1,000 requests queued behind a holder", ops: 1000,
		setup: `ENQ(KEYS, {P,'h:', '600000', 'holder', 'host', '1', '[{"id":"h'..R..'","k":[["q'..R..'",1]]}]'})`,
		run: `local reqs = {}
for i=1,1000 do reqs[i] = '{"id":"w'..R..'-'..i..'","k":[["q'..R..'",1]]}' end
local x = ENQ(KEYS, {P,'h:', '600000', 'o1', 'host', '1', '['..table.concat(reqs, ',')..']'})
if type(x) ~= 'table' then return x end`,
	},
	{
		name: "enqueue 1,000 on own keys", what: "per request: one step of 1,000 requests, each on a key of its own (granted)", ops: 1000,
		run: `local reqs = {}
for i=1,1000 do reqs[i] = '{"id":"w'..R..'-'..i..'","k":[["o'..R..'-'..i..'",1]]}' end
local x = ENQ(KEYS, {P,'h:', '600000', 'o1', 'host', '1', '['..table.concat(reqs, ',')..']'})
if type(x) ~= 'table' then return x end`,
	},
}

// floors are the commands of one uncontended acquire and release of one
// key, with nothing of the scripts' logic around them (-floor): what any
// script of the same layout costs at least, and what a layout with the
// holder in its key's record would. The values are those the scripts write.
var floors = []scenario{
	{
		name: "today's 14 commands", ops: 500,
		what: "the commands of today's lean acquire and release (TIME, HMGET entries, HMGET lanes, ZRANGEBYSCORE deadlines, HSET entries, ZADD deadlines, HSET lanes; TIME, the same three reads, HDEL, ZREM, HSET)",
		run: floorPrelude + `for i=1,500 do
  local id = 'e'..R..i
  today_acquire(id)
  today_release(id)
end`,
	},
	{
		name: "today's 14 commands and their JSON", ops: 500,
		what: "the same, and the JSON today's scripts decode and encode: the request, the entry record written, the entry record read back",
		run: floorPrelude + `for i=1,500 do
  local id = 'e'..R..i
  local req = cjson.decode('[{"id":"'..id..'","k":[["k",1]],"c":"true","t":"lanectl lock"}]')
  today_acquire(id, cjson.encode({o=OWNER, h='vm', p=8141, c=req[1].c, t=req[1].t, k=req[1].k, s='h', q=0, e=1796085504652, g=1796085504652, x={k='1839191556764467'}}))
  local e = cjson.decode(ENTRY)
  today_release(id)
end`,
	},
	{
		name: "a holder in its key's record: 10 commands", ops: 500,
		what: "a layout that keeps an uncontended holder in its key's record and only its id's key in entries: TIME, HMGET entries, HMGET lanes, HSET lanes, HSET entries; TIME, HMGET entries, HMGET lanes, HSET lanes, HDEL entries",
		run: floorPrelude + `for i=1,500 do
  local id = 'e'..R..i
  redis.call('TIME')
  redis.call('HMGET', E, '\0', id)
  redis.call('HMGET', L, '\0', 'k')
  redis.call('HSET', L, 'k', '1796085501320749 1 1839191556764467 0 '..id..' 1796085514652 '..OWNER..' vm 8141')
  redis.call('HSET', E, id, 'k')
  redis.call('TIME')
  redis.call('HMGET', E, '\0', id)
  redis.call('HMGET', L, '\0', 'k')
  redis.call('HSET', L, 'k', '1796085501320749 1 1839191556764467 0')
  redis.call('HDEL', E, id)
end`,
	},
	{
		name: "redislock's 3 commands", ops: 500,
		what: "SET NX PX, then GET and DEL (redislock's acquire and its release script)",
		run: `local R = ARGV[1]
for i=1,500 do
  local v = 'e'..R..i
  redis.call('SET', KEYS[1], v, 'NX', 'PX', '10000')
  if redis.call('GET', KEYS[1]) == v then redis.call('DEL', KEYS[1]) end
end`,
	},
}

// floorPrelude defines the floors' helpers: today's commands for one
// acquire and one release of the key k, by the entry id.
const floorPrelude = `local R = ARGV[1]
local E, L, D = KEYS[1], KEYS[2], KEYS[4]
local OWNER = 'ff6cnq5przhafyxoxoba'
local ENTRY = '{"q":0,"p":8141,"c":"true","t":"lanectl lock","g":1796085504652,"h":"vm","k":[["k",1]],"x":{"k":"1839191556764467"},"e":1796085504652,"s":"h","o":"ff6cnq5przhafyxoxoba"}'
redis.call('HSET', E, '\0', '')
redis.call('HSET', L, '\0', '2 1796085501320749 0 10000 0', '\2', 'a value longer than 64 bytes keeps this hash in the hashtable encoding')
redis.call('ZADD', D, '-inf', '\0')
local function today_acquire(id, rec)
  redis.call('TIME')
  redis.call('HMGET', E, '\0', id)
  redis.call('HMGET', L, '\0', 'k')
  redis.call('ZRANGEBYSCORE', D, '-inf', '1796085504652', 'LIMIT', '0', '101')
  redis.call('HSET', E, id, rec or ENTRY)
  redis.call('ZADD', D, '1796085514652', id)
  redis.call('HSET', L, 'k', '1796085501320749 1 1839191556764467 0 '..id)
end
local function today_release(id)
  redis.call('TIME')
  redis.call('HMGET', E, '\0', id)
  redis.call('HMGET', L, '\0', 'k')
  redis.call('ZRANGEBYSCORE', D, '-inf', '1796085504652', 'LIMIT', '0', '101')
  redis.call('HDEL', E, id)
  redis.call('ZREM', D, id)
  redis.call('HSET', L, 'k', '1796085501320749 1 1839191556764467 0')
end
`

// acquireRelease is the driver of 500 acquires and releases, each of a
// new entry on the key the Lua expression key names (i is the loop's
// count).
func acquireRelease(key string) string {
	return `for i=1,500 do
  local a = ENQ(KEYS, {P,'h:', '30000', 'o1', 'host', '1', '[{"id":"e'..R..i..'","k":[["'..` + key + `..'",1]]}]'})
  if type(a) ~= 'table' or ST1(a) ~= 'h' then return a end
  local b = REL(KEYS, {P,'h:','o1','0','e'..R..i})
  if type(b) ~= 'table' or WAS1(b) ~= 'h' then return b end
end`
}

const waiters1000 = `ENQ(KEYS, {P,'h:', '600000', 'holder', 'host', '1', '[{"id":"h'..R..'","k":[["k'..R..'",1]]}]'})
for b=0,3 do
  local reqs = {}
  for i=1,250 do reqs[i] = '{"id":"w'..R..'-'..(b*250+i)..'","k":[["k'..R..'",1]]}' end
  local x = ENQ(KEYS, {P,'h:', '600000', 'o1', 'host', '1', '['..table.concat(reqs, ',')..']'})
  if type(x) ~= 'table' then return x end
end`

// quiet drops go-redis's log lines (its pool logs every refused dial while
// the server under valgrind starts).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	base := flag.String("base", "", "a git revision whose scripts are counted beside this checkout's")
	dir := flag.String("dir", "", "the scripts' directory (default: scripts/lua of the repository this runs in)")
	server := flag.String("redis-server", "redis-server", "the redis-server binary to run under callgrind")
	floor := flag.Bool("floor", false, "count the floors instead: the commands of one acquire and release alone, in today's layout and in others (no scripts)")
	flag.StringVar(&only, "only", "", "count only the scenarios whose name matches this regular expression")
	flag.BoolVar(&fcall, "fcall", false, "count real FCALLs instead: the library loaded once, steps sent by this program, the whole server's instructions per op (the command's parsing, the call and its reply included)")
	flag.Parse()
	var err error
	if only != "" {
		re, rerr := regexp.Compile(only)
		if rerr != nil {
			fmt.Fprintln(os.Stderr, "luacost: -only:", rerr)
			os.Exit(2)
		}
		scenarios = slices.DeleteFunc(scenarios, func(sc scenario) bool { return !re.MatchString(sc.name) })
		fcallScenarios = slices.DeleteFunc(fcallScenarios, func(sc fcallScenario) bool { return !re.MatchString(sc.name) })
	}
	if *floor {
		err = runFloors(*server)
	} else {
		err = run(*dir, *base, *server)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "luacost:", err)
		os.Exit(1)
	}
}

// fcall is -fcall (fcall.go); only is -only.
var (
	fcall bool
	only  string
)

// version is one version of the scripts: its name and how to read one of
// its files (e.g. "lib.lua").
type version struct {
	name string
	read func(file string) (string, error)
}

func run(dir, base, server string) error {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fmt.Errorf("finding the repository: %w", err)
	}
	top := strings.TrimSpace(string(root))
	if dir == "" {
		dir = filepath.Join(top, "scripts", "lua")
	}
	versions := []version{{"this checkout", func(f string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		return string(b), err
	}}}
	if base != "" {
		versions = append(versions, version{base, func(f string) (string, error) {
			b, err := exec.Command("git", "-C", top, "show", base+":scripts/lua/"+f).Output()
			if err != nil {
				return "", fmt.Errorf("git show %s:scripts/lua/%s: %w", base, f, err)
			}
			return string(b), nil
		}})
	}
	if fcall {
		return runFcall(versions, server)
	}
	preludes := make([]string, len(versions))
	for i, v := range versions {
		if preludes[i], err = prelude(v.read); err != nil {
			return err
		}
	}

	srv, err := startServer(server)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()

	counts := make([][]float64, len(scenarios))
	for i, sc := range scenarios {
		counts[i] = make([]float64, len(versions))
		for j := range versions {
			n, err := srv.count(ctx, preludes[j], sc, fmt.Sprintf("%d%d", i, j))
			if err != nil {
				return fmt.Errorf("%s (%s): %w", sc.name, versions[j].name, err)
			}
			counts[i][j] = n
		}
	}
	fmt.Printf("machine instructions per op in the lanes scripts (callgrind, %s)\n\n", srv.version)
	printCounts(versions, func(i int) string { return scenarios[i].name }, counts)
	for _, sc := range scenarios {
		fmt.Printf("- %s: %s\n", sc.name, sc.what)
	}
	return nil
}

// printCounts prints the table of counts[scenario][version], with the
// change from the second version when there are two, and a blank line.
func printCounts(versions []version, name func(int) string, counts [][]float64) {
	header := "| scenario | " + versions[0].name
	rule := "|---|---:"
	if len(versions) > 1 {
		header += " | " + versions[1].name + " | change"
		rule += "|---:|---:"
	}
	fmt.Println(header + " |")
	fmt.Println(rule + "|")
	for i, c := range counts {
		line := fmt.Sprintf("| %s | %.0f", name(i), c[0])
		if len(c) > 1 {
			line += fmt.Sprintf(" | %.0f | %+.1f%%", c[1], 100*(c[0]-c[1])/c[1])
		}
		fmt.Println(line + " |")
	}
	fmt.Println()
}

// runFloors counts the floors (-floor).
func runFloors(server string) error {
	srv, err := startServer(server)
	if err != nil {
		return err
	}
	defer srv.stop()
	fmt.Printf("machine instructions per acquire+release, commands alone (callgrind, %s)\n\n", srv.version)
	fmt.Println("| floor | instructions |")
	fmt.Println("|---|---:|")
	for i, sc := range floors {
		n, err := srv.count(context.Background(), "", sc, fmt.Sprintf("f%d", i))
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		fmt.Printf("| %s | %.0f |\n", sc.name, n)
	}
	fmt.Println()
	for _, sc := range floors {
		fmt.Printf("- %s: %s\n", sc.name, sc.what)
	}
	return runCallFloors(srv)
}

// prelude is lib.lua and the three scripts as local functions ENQ, REL and
// HB of one chunk, as package lua's Library puts them in functions.
func prelude(read func(string) (string, error)) (string, error) {
	var b strings.Builder
	lib, err := read("lib.lua")
	if err != nil {
		return "", err
	}
	b.WriteString(lib)
	for _, f := range []struct{ name, file string }{{"ENQ", "enqueue.lua"}, {"REL", "release.lua"}, {"HB", "heartbeat.lua"}} {
		body, err := read(f.file)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\nlocal function %s(KEYS, ARGV)\n%s\nend\n", f.name, body)
	}
	// The drivers speak the version's protocol (P), and read its replies
	// in either form: protocol 2's nested lists, protocol 3's flat ones.
	b.WriteString(`local R = ARGV[1]
local P = PROTOCOL
local function ST1(x) if type(x[2]) == 'table' then return x[2][1][2] end return x[4] end
local function WAS1(x) if type(x[2]) == 'table' then return x[2][1] end return x[2] end
local function NGRANT(x, n) if type(x[3]) == 'table' then return #x[3] end return #x - 1 - n end
`)
	return b.String(), nil
}

// server is a redis-server under callgrind.
type server struct {
	cmd     *exec.Cmd
	dir     string
	pid     int
	c       *redis.Client
	version string
}

func startServer(bin string) (*server, error) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed (Debian: apt-get install valgrind)", tool)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "luacost-")
	if err != nil {
		return nil, err
	}
	args := []string{"--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dir, "cg.%p")}
	if *keep != "" {
		// each kept dump names its functions in full: by default a later
		// dump gives only the numbers an earlier one defined, and
		// callgrind_annotate of it alone shows nothing by function
		args = append(args, "--compress-strings=no", "--compress-pos=no")
	}
	args = append(args, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	cmd := exec.Command("valgrind", args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &server{cmd: cmd, dir: dir, pid: cmd.Process.Pid,
		c: redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ReadTimeout: 5 * time.Minute, WriteTimeout: time.Minute})}
	ctx := context.Background()
	for deadline := time.Now().Add(time.Minute); ; {
		if err = s.c.Ping(ctx).Err(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("redis-server under valgrind did not answer: %w", err)
	}
	info, _ := s.c.Info(ctx, "server").Result()
	s.version = "redis " + infoField(info, "redis_version")
	return s, nil
}

func infoField(info, name string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), name+":"); ok {
			return v
		}
	}
	return "?"
}

// keep is the directory the callgrind dump of each counted run goes to,
// when set: -keep DIR, then callgrind_annotate DIR/<scenario>.<tag>.callgrind
// (by function with a redis-server built with symbols, -redis-server).
var keep = flag.String("keep", "", "a directory to keep each scenario's callgrind dump in (for callgrind_annotate)")

func (s *server) stop() {
	s.c.Close()
	s.cmd.Process.Kill()
	s.cmd.Wait()
	os.RemoveAll(s.dir)
}

// stateKeys are the seven KEYS of the lanes scripts for a namespace of
// its own, named by tag.
func stateKeys(tag string) []string {
	keys := make([]string, 7)
	for i, k := range []string{"entries", "lanes", "queue", "deadlines", "nested", "meta", "tombs"} {
		keys[i] = "luacost:{" + tag + "}:" + k
	}
	return keys
}

// count runs sc's setup, then its run under a zeroed callgrind counter,
// and returns the instructions of the run divided by sc.ops.
func (s *server) count(ctx context.Context, prelude string, sc scenario, tag string) (float64, error) {
	keys := stateKeys(tag)
	defer s.c.Del(ctx, keys...)
	if err := s.c.ScriptFlush(ctx).Err(); err != nil {
		return 0, err
	}
	r := "r" + tag
	if sc.setup != "" {
		if err := expectOK(s.c.Eval(ctx, prelude+sc.setup+"\nreturn 'ok'", keys, r).Result()); err != nil {
			return 0, fmt.Errorf("setup: %w", err)
		}
	}
	src := prelude + sc.run + "\nreturn 'ok'"
	if err := s.c.ScriptLoad(ctx, src).Err(); err != nil {
		return 0, err
	}
	if err := s.control("-z"); err != nil {
		return 0, err
	}
	if err := expectOK(s.c.Eval(ctx, src, keys, r).Result()); err != nil {
		return 0, err
	}
	total, err := s.dump(tag, sc.name)
	if err != nil {
		return 0, err
	}
	return float64(total) / float64(sc.ops), nil
}

// dump makes callgrind write what it counted since the last zeroing, and
// returns the instruction total; with -keep, the dump goes there, named by
// the scenario and tag.
func (s *server) dump(tag, scenario string) (int64, error) {
	old, _ := filepath.Glob(filepath.Join(s.dir, "cg.*"))
	for _, f := range old {
		os.Remove(f)
	}
	if err := s.control("-d"); err != nil {
		return 0, err
	}
	dumps, _ := filepath.Glob(filepath.Join(s.dir, fmt.Sprintf("cg.%d.*", s.pid)))
	if len(dumps) == 0 {
		return 0, errors.New("callgrind wrote no dump")
	}
	total, err := totalIr(dumps[len(dumps)-1])
	if err != nil {
		return 0, err
	}
	if *keep != "" {
		// for callgrind_annotate: by function with a Redis built with symbols
		name := strings.NewReplacer(" ", "-", ",", "", "+", "-").Replace(scenario) + "." + tag + ".callgrind"
		if err := os.Rename(dumps[len(dumps)-1], filepath.Join(*keep, name)); err != nil {
			return 0, err
		}
	}
	return total, nil
}

func (s *server) control(flag string) error {
	out, err := exec.Command("callgrind_control", flag, strconv.Itoa(s.pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %v: %s", flag, err, out)
	}
	return nil
}

func expectOK(v any, err error) error {
	if err != nil {
		return err
	}
	if v != "ok" {
		return fmt.Errorf("the driver answered %v", v)
	}
	return nil
}

// totalIr reads the instruction total ("summary:" or "totals:") of a
// callgrind dump.
func totalIr(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{"summary: ", "totals: "} {
			if v, ok := strings.CutPrefix(line, p); ok {
				return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no instruction total", path)
}
