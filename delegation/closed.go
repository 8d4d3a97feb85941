package delegation

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"

	fleetv1alpha1 "github.com/fleetd/fleetd/api/v1alpha1"
)

// Closed reports whether d needs nothing more from the gateway: it settled
// and the settling was recorded, its outcome was claimed or is owed to
// nobody (Unclaimed is false), it carries no reply still to be typed to a
// member sender, and no late reply can come to it: none is allowed, or
// it is superseded (another message to its member was typed after it, and
// takes the worker's reply; see Superseded). Only retention acts on a
// closed Delegation; one opens again only when a waiter that left after it
// settled is recorded (Detach), and its outcome is owed again, or when the
// message that superseded it is deleted.
func Closed(d *fleetv1alpha1.Delegation, superseded bool) bool {
	return Settled(d.Status.Phase) &&
		meta.IsStatusConditionTrue(d.Status.Conditions, fleetv1alpha1.ConditionSettled) &&
		!Unclaimed(d) && !NeedsCarrying(d) && (superseded || !LateReplyAllowed(d))
}

// Bytes is what a message's sender put into it: its content and its
// images. An image shared by a broadcast's messages counts in each.
func Bytes(d *fleetv1alpha1.Delegation) int64 {
	n := int64(len(d.Spec.Content))
	if d.Spec.Images != nil {
		for _, img := range d.Spec.Images.Items {
			n += img.Size
		}
	}
	return n
}

// SenderLabel is the short stable hash of a principal that Delegations
// carry in LabelSender. Principal names (service-account user names) do
// not fit a label value, so the label holds a hash.
func SenderLabel(p fleetv1alpha1.Principal) string {
	sum := sha256.Sum256([]byte(string(p.Kind) + "\x00" + p.Name))
	return hex.EncodeToString(sum[:10])
}

// MarkClosed sets on d the marks that say whether it is closed (superseded
// as Closed takes it): on a closed one LabelClosed, and what the gateway reads of it without its
// message (LabelMember, LabelSender, AnnotationBytes); on one that is not,
// no LabelClosed. It reports whether it changed anything.
func MarkClosed(d *fleetv1alpha1.Delegation, superseded bool) bool {
	if MarksCurrent(d, superseded) {
		return false
	}
	labels, annotations := d.GetLabels(), d.GetAnnotations()
	if !Closed(d, superseded) {
		delete(labels, fleetv1alpha1.LabelClosed)
		d.SetLabels(labels)
		return true
	}
	want, bytes := closedMarks(d)
	if labels == nil {
		labels = map[string]string{}
	}
	for k, v := range want {
		labels[k] = v
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[fleetv1alpha1.AnnotationBytes] = bytes
	d.SetLabels(labels)
	d.SetAnnotations(annotations)
	return true
}

// MarksCurrent reports whether d carries the marks MarkClosed would set,
// without changing it.
func MarksCurrent(d *fleetv1alpha1.Delegation, superseded bool) bool {
	labels := d.GetLabels()
	if !Closed(d, superseded) {
		_, marked := labels[fleetv1alpha1.LabelClosed]
		return !marked
	}
	want, bytes := closedMarks(d)
	if d.GetAnnotations()[fleetv1alpha1.AnnotationBytes] != bytes {
		return false
	}
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// closedMarks are the labels and the bytes annotation of a closed d.
func closedMarks(d *fleetv1alpha1.Delegation) (labels map[string]string, bytes string) {
	labels = map[string]string{
		fleetv1alpha1.LabelClosed: "true",
		fleetv1alpha1.LabelSender: SenderLabel(d.Spec.From),
	}
	// spec.to's pattern allows a name no Member can have and no label
	// value may be ("a-"): such a Delegation is found by its spec alone.
	if len(validation.IsValidLabelValue(d.Spec.To)) == 0 {
		labels[fleetv1alpha1.LabelMember] = d.Spec.To
	}
	return labels, strconv.FormatInt(Bytes(d), 10)
}

// MarkedBytes is the message bytes a closed Delegation's marks record, and
// whether they record any.
func MarkedBytes(annotations map[string]string) (int64, bool) {
	n, err := strconv.ParseInt(annotations[fleetv1alpha1.AnnotationBytes], 10, 64)
	return n, err == nil && n >= 0
}
