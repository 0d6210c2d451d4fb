"""The shared definitions: object and list metadata, owner references, label selectors,
times, quantities, and the Status errors come in."""

from __future__ import annotations

from devicedeck.sim.apiserver.openapi.model import (
    INT_OR_STRING,
    LABEL_SELECTOR,
    LIST_META,
    META,
    MICRO_TIME,
    OBJECT_META,
    QUANTITY,
    STATUS,
    TIME,
    Definition,
    Prim,
    array_of,
    boolean,
    integer,
    open_list,
    open_object,
    ref,
    string,
    string_map,
    strings,
    time,
)

OWNER_REFERENCE = f"{META}.OwnerReference"

DEFINITIONS = [
    Definition(
        OBJECT_META,
        "Metadata every stored object has: who it is (name, namespace, uid), which version of "
        "it this is, and the labels, annotations and owners people and controllers attach.",
        {
            "name": string("The object's name, unique among objects of its kind in its namespace."),
            "generateName": string(
                "A prefix the server completes into a unique name when no name is given."
            ),
            "namespace": string("The namespace the object lives in; empty for cluster objects."),
            "selfLink": string("Deprecated and left empty."),
            "uid": string("The server-assigned identity of this incarnation of the object."),
            "resourceVersion": string(
                "An opaque version of the object, for optimistic concurrency and watches."
            ),
            "generation": integer(
                "The version of the desired state, counted by the server.", "int64"
            ),
            "creationTimestamp": time("When the server stored the object first."),
            "deletionTimestamp": time("When the object was asked to be deleted."),
            "deletionGracePeriodSeconds": integer(
                "Seconds the object has to go gracefully once deleted.", "int64"
            ),
            "labels": string_map("Key/value pairs to select and group objects by."),
            "annotations": string_map("Key/value pairs for tools and people; not selectable."),
            "ownerReferences": array_of(
                OWNER_REFERENCE, "The objects this one belongs to.", merge_key="uid"
            ),
            "finalizers": strings(
                "What must happen before the object is removed from storage.", "set"
            ),
            "managedFields": open_list("Which manager set which fields, for server-side apply."),
        },
        closed=True,
    ),
    Definition(
        LIST_META,
        "Metadata of a list: its version, and where the next page starts.",
        {
            "resourceVersion": string("The version of the collection the list was read at."),
            "continue": string("A token that asks for the next page."),
            "remainingItemCount": integer("How many items the following pages hold.", "int64"),
            "selfLink": string("Deprecated and left empty."),
        },
    ),
    Definition(
        OWNER_REFERENCE,
        "Names an object that owns this one; deleting the owner deletes what it owns.",
        {
            "apiVersion": string("API version of the owner.", required=True),
            "kind": string("Kind of the owner.", required=True),
            "name": string("Name of the owner.", required=True),
            "uid": string("UID of the owner.", required=True),
            "controller": boolean("Whether the owner is this object's managing controller."),
            "blockOwnerDeletion": boolean(
                "Whether a foreground deletion of the owner waits for this object."
            ),
        },
        closed=True,
    ),
    Definition(
        LABEL_SELECTOR,
        "Selects objects by their labels; every requirement given must hold.",
        {
            "matchLabels": string_map("Labels that must be present with exactly these values."),
            "matchExpressions": open_list(
                "Requirements of the form key In/NotIn/Exists/DoesNotExist values."
            ),
        },
    ),
    Definition(TIME, "A time, in RFC 3339 with whole seconds.", scalar=Prim("string", "date-time")),
    Definition(
        MICRO_TIME, "A time, in RFC 3339 with microseconds.", scalar=Prim("string", "date-time")
    ),
    Definition(
        QUANTITY,
        "An amount, as a string: a number with an optional suffix (100m, 2Gi, 4).",
        scalar=Prim("string"),
    ),
    Definition(
        INT_OR_STRING,
        "A whole number or a string, such as a port number or a port name, or 25%.",
        scalar=Prim("string", "int-or-string"),
    ),
    Definition(
        STATUS,
        "The outcome of a call that returns no object: success, or why it failed.",
        {
            "apiVersion": string("v1."),
            "kind": string("Status."),
            "metadata": ref(LIST_META, "The version the answer was made at."),
            "status": string("Success or Failure."),
            "message": string("What happened, for people."),
            "reason": string("Why it failed, in one word (NotFound, Conflict, Invalid, ...)."),
            "details": open_object("More about the failure: the object, the field causes."),
            "code": integer("The HTTP status code of the answer."),
        },
        kind=("", "v1", "Status"),
    ),
]
