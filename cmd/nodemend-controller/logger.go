package main

import (
	"io"
	"os"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// newLogger is the controller's JSON logger (the fields of
// controller-runtime's production logger), at level, writing to out
// (nil: stderr). Unlike that logger it does not sample: zap's sampler
// keeps 100 lines of one message a second, so a storm's thousand
// "repair started" lines in a second would keep a tenth of the record of
// what the controller did to which node. The controller logs a line per
// step of a repair, not per event it watches, so its volume is bounded by
// the repairs.
func newLogger(level zapcore.Level, out io.Writer) logr.Logger {
	if out == nil {
		out = os.Stderr
	}
	ecfg := zap.NewProductionEncoderConfig()
	ecfg.EncodeTime = zapcore.RFC3339TimeEncoder
	core := zapcore.NewCore(&ctrlzap.KubeAwareEncoder{Encoder: zapcore.NewJSONEncoder(ecfg)}, zapcore.Lock(zapcore.AddSync(out)), level)
	return zapr.NewLogger(zap.New(core, zap.AddStacktrace(zapcore.ErrorLevel)))
}
