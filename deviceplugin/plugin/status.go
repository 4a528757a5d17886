package plugin

import (
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpushare/gpushare/deviceplugin/allocate"
)

// errUnknownCard: the IDs name a card this plugin does not advertise.
var errUnknownCard = errors.New("device IDs name a card this plugin does not advertise")

// toStatus is the one place errors become gRPC status codes. The message is
// what the kubelet puts in the pod's UnexpectedAdmissionError event.
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, allocate.ErrNotScheduled), errors.Is(err, allocate.ErrPodRequest), errors.Is(err, allocate.ErrCardInUse), errors.Is(err, allocate.ErrCardsNotScheduled), errors.Is(err, errUnitsHeld):
		code = codes.FailedPrecondition
	case errors.Is(err, allocate.ErrSpansCards), errors.Is(err, errUnknownCard), errors.Is(err, errNotAdvertised), errors.Is(err, allocate.ErrBadDeviceID), errors.Is(err, allocate.ErrNoDeviceIDs), errors.Is(err, allocate.ErrCardID):
		code = codes.InvalidArgument
	case errors.Is(err, allocate.ErrNoPending), errors.Is(err, allocate.ErrNoPendingCards):
		code = codes.NotFound
	case errors.Is(err, errPodCache):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}
