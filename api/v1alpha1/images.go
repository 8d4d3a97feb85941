package v1alpha1

// Names of images sent with messages.
const (
	// SecretTypeImages is the type of the Secret holding the images of a
	// message (DelegationImages). fleetd delivers images only from a Secret
	// of this type whose bytes match the Delegation's digests.
	SecretTypeImages = "fleet.fleetd.dev/images"

	// ReasonImagesUnavailable: the images of a message could not be read
	// from their Secret, or did not match their digests; nothing was typed.
	ReasonImagesUnavailable = "ImagesUnavailable"
)
