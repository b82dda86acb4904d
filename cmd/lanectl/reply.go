package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// completeReply checks the flags of `batch --reply`: with --resume it needs
// --calls, the response the checkpoint's calls came from, since a
// checkpoint does not keep the response's form.
func (o *batchOptions) completeReply() error {
	if o.reply && o.resume != "" && o.calls == "" {
		return usageErrorf("--reply with --resume needs --calls FILE: the response the checkpoint's calls came from (a checkpoint does not keep its form)")
	}
	return nil
}

// prepareReply reads what --reply needs before the batch runs: the
// wording of the --tools file's [reply] table and, with --resume, the
// response of --calls, which must hold the checkpoint's calls. It warns,
// on standard error, of each item of the response the reply cannot
// answer.
func (o *batchOptions) prepareReply(cmd *cobra.Command, cp *sched.Checkpoint) (batch.Wording, error) {
	if !o.reply {
		return batch.Wording{}, nil
	}
	w, err := batch.LoadWording(o.tools)
	if err != nil {
		return batch.Wording{}, &exitError{code: exitDataErr, err: err}
	}
	if cp != nil {
		if _, _, err := o.readCalls(cmd.InOrStdin()); err != nil {
			return batch.Wording{}, &exitError{code: exitDataErr, err: err}
		}
		if err := sameCalls(o.response.Calls, cp.Calls); err != nil {
			return batch.Wording{}, &exitError{code: exitDataErr, err: fmt.Errorf("%s is not the response of the checkpoint %s: %w", o.calls, o.resume, err)}
		}
	}
	for _, u := range o.response.Unanswered {
		fmt.Fprintf(cmd.ErrOrStderr(), "lanectl: warning: %s: --reply cannot answer it; the next request needs its answer beside the reply\n", printable(u))
	}
	return w, nil
}

// sameCalls reports how a response's calls differ from a checkpoint's.
func sameCalls(resp, cp []sched.Call) error {
	if len(resp) != len(cp) {
		return fmt.Errorf("it has %d tool calls, the checkpoint %d", len(resp), len(cp))
	}
	for i := range resp {
		if resp[i].ID != cp[i].ID || resp[i].Tool != cp[i].Tool {
			return fmt.Errorf("call %d is %s %s, in the checkpoint %s %s", i, cell(resp[i].ID), cell(resp[i].Tool), cell(cp[i].ID), cell(cp[i].Tool))
		}
	}
	return nil
}

// printReply writes the reply to the response (batch.Response.Reply),
// indented; with --json, {"reply": ..., "outcomes": ...}, the outcomes as
// `batch --json` prints them.
func (o *batchOptions) printReply(cmd *cobra.Command, w batch.Wording, calls []sched.Call, res *sched.Result) error {
	reply, err := o.response.Reply(callOutcomes(calls, res, o.pausedText()), w)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if o.global.json {
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			Reply    json.RawMessage `json:"reply"`
			Outcomes []batchOutcome  `json:"outcomes"`
		}{reply, newBatchView(calls, res, o.pausedText())})
	} else {
		err = json.Indent(&b, reply, "", "  ")
		b.WriteByte('\n')
	}
	if err != nil {
		return err
	}
	_, err = cmd.OutOrStdout().Write(b.Bytes())
	return err
}
