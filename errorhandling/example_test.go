package errorhandling_test

import (
	"errors"
	"fmt"

	"github.com/backstophq/backstop/errorhandling"
)

func ExampleErrorClassifier_Classify() {
	classifier := errorhandling.NewErrorClassifier()

	for _, status := range []int{503, 401, 422} {
		err := errorhandling.WithHTTPStatus(fmt.Errorf("POST /hooks/orders: status %d", status), status)
		v := classifier.Classify(err)
		fmt.Printf("%d: class=%s retryable=%t blame=%s reason=%s code=%s\n",
			status, v.Class, v.Retryable, v.Blame, v.Reason, v.Code)
	}
	// Output:
	// 503: class=transient retryable=true blame=destination reason=TransportUnavailable code=service_unavailable
	// 401: class=transient retryable=true blame=destination reason=DependencyFailure code=unauthorized
	// 422: class=permanent retryable=false blame=message reason=ValidationFailure code=http_422
}

func ExamplePermanent() {
	errInvalid := errors.New("order has no customer")
	// The outermost marker wins, through any amount of %w wrapping.
	err := fmt.Errorf("handle order 42: %w",
		errorhandling.Permanent(errorhandling.Transient(errInvalid)))

	v := errorhandling.NewErrorClassifier().Classify(err)
	fmt.Println(err)
	fmt.Println(v.Class, v.Retryable)
	fmt.Println(errors.Is(err, errInvalid), errorhandling.IsPermanent(err))
	// Output:
	// handle order 42: order has no customer
	// permanent false
	// true true
}

func ExampleFingerprint() {
	a := fmt.Errorf("deliver %s: %w", "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
		errors.New("dial tcp 10.0.0.7:5432: connect: connection refused"))
	b := fmt.Errorf("deliver %s: %w", "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
		errors.New("dial tcp 10.0.0.9:6543: connect: connection refused"))

	fmt.Println(errorhandling.Fingerprint(a) == errorhandling.Fingerprint(b))
	fmt.Println(errorhandling.Fingerprint(errorhandling.Permanent(a)) == errorhandling.Fingerprint(a))
	fmt.Println(errorhandling.NormalizeMessage(a.Error()))
	// Output:
	// true
	// true
	// deliver <uuid>: dial tcp <addr>: connect: connection refused
}

func ExampleErrorClassifier_IsRetryable() {
	classifier := errorhandling.NewErrorClassifier()

	// Check if error is retryable
	if classifier.IsRetryable("timeout") {
		fmt.Println("timeout: retry the operation")
	}

	// Add custom retryable error
	fmt.Println(classifier.IsRetryable("custom_temporary_error"))
	classifier.AddRetryableError("custom_temporary_error")
	fmt.Println(classifier.IsRetryable("custom_temporary_error"))

	// Classify honours the codes attached with WithCode.
	err := errorhandling.WithCode(errors.New("backend busy"), "custom_temporary_error")
	fmt.Println(classifier.Classify(err).Class)
	// Output:
	// timeout: retry the operation
	// false
	// true
	// transient
}

func ExamplePropagationConfig_Validate() {
	config := &errorhandling.PropagationConfig{
		Policy:              errorhandling.PropagationPolicyFail,
		AllowPartialSuccess: true,
	}
	fmt.Println(config.Validate())

	config.Policy = errorhandling.PropagationPolicyAllowPartial
	config.CriticalTasks = []string{"validate", "commit"}
	fmt.Println(config.Validate(), config.IsCritical("commit"), config.IsCritical("notify"))
	// Output:
	// errorhandling: PropagationConfig.AllowPartialSuccess: cannot be true with policy "fail", which stops the run at the first failure
	// <nil> true false
}
