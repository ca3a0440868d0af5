// opclass native keyset guard: one call decides whether an op call is "plain eager".
//
// guard(spec, *values) -> int
//   spec:   bytes, one letter per value: 'T' Tensor, 'O' Optional[Tensor], 'L' Tensor[],
//           'M' Tensor?[], 'X' anything (not looked at).
//   return: 0 = not plain eager (use the dispatcher); otherwise DEVICE | GRAD where DEVICE is
//           1 (cpu) or 2 (cuda) and GRAD (4) means grad mode is on, autograd is not excluded
//           and some input requires grad.
// A value is plain when its type is exactly torch.Tensor or nn.Parameter and its dispatch key
// set is exactly {backend, ADInplaceOrView, Autograd<backend>, Autocast<backend>} (or the
// inference-tensor set {backend, Autocast<backend>}): that excludes other layouts, conj/neg
// bits, Python subclasses, functorch wrappers and every other key. The thread-local state must
// have no key included beyond BackendSelect and ADInplaceOrView (no dispatch or functorch
// modes, no tracing), no TorchFunctionMode, no RecordFunction callbacks (profiler), and, when
// the op has an autocast rule, autocast off for the device; and no forward-AD level entered.
//
// fresh(out) -> bool: out is a plain Tensor only the caller references, no view, with a storage
// of its own, so it cannot alias an input (the cheap pre-check before the full aliasing check).
//
// MetaBase: a metaclass whose call runs ``cls._opclass_call(*args, **kwargs)`` directly, or where
// that fails to bind its arguments, the Python fallback (set_fallback), which raises the
// dispatcher's error.
#include <Python.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

using c10::DispatchKey;
using c10::DispatchKeySet;

// The codes a classification returns, as opclass/core/types.py names them.
constexpr int kCodeCpu = 1, kCodeCuda = 2, kCodeGrad = 4;

PyTypeObject* parameter_type = nullptr;
PyObject* fallback = nullptr;  // OpMeta's Python __call__
PyObject* call_name = nullptr;  // "_opclass_call"
PyObject* forward_ad = nullptr;  // torch.autograd.forward_ad, whose _current_level >= 0 inside dual_level
PyObject* level_name = nullptr;  // "_current_level"

// A forward-AD level is entered (reading the module global: no lock, unlike ForwardADLevel).
inline bool forward_ad_active() {
  if (forward_ad == nullptr) {
    return false;
  }
  // The module's dict directly: a generic getattr costs more than the rest of the guard.
  PyObject* level = PyDict_GetItemWithError(PyModule_GetDict(forward_ad), level_name);  // borrowed
  if (level == nullptr || !PyLong_CheckExact(level)) {
    PyErr_Clear();
    return true;  // unknown: be safe
  }
  return PyLong_AsLong(level) >= 0;
}

DispatchKeySet plain_set(DispatchKey backend, DispatchKey autograd, DispatchKey autocast) {
  return DispatchKeySet({backend, DispatchKey::ADInplaceOrView, autograd, autocast});
}

const DispatchKeySet kCpu = plain_set(DispatchKey::CPU, DispatchKey::AutogradCPU, DispatchKey::AutocastCPU);
const DispatchKeySet kCpuInference = DispatchKeySet({DispatchKey::CPU, DispatchKey::AutocastCPU});
const DispatchKeySet kCuda = plain_set(DispatchKey::CUDA, DispatchKey::AutogradCUDA, DispatchKey::AutocastCUDA);
const DispatchKeySet kCudaInference = DispatchKeySet({DispatchKey::CUDA, DispatchKey::AutocastCUDA});
const DispatchKeySet kAllowedIncluded = DispatchKeySet({DispatchKey::BackendSelect, DispatchKey::ADInplaceOrView});
// Exclusions plain eager mode may have: autocast off (the default), autograd off (inference_mode,
// AutoDispatchBelowAutograd) and ADInplaceOrView off. Excluding anything else (a backend, the
// Python key...) changes what the dispatcher would run.
const DispatchKeySet kAllowedExcluded =
    c10::autocast_dispatch_keyset | c10::autograd_dispatch_keyset | DispatchKeySet(DispatchKey::ADInplaceOrView);

inline bool excluded_ok(DispatchKeySet excluded) {
  // Subtraction keeps backend bits; only functionality bits matter here.
  return ((excluded - kAllowedExcluded).raw_repr() >> c10::num_backends) == 0;
}

// 1 cpu, 2 cuda, 0 not plain; sets *grad when the tensor requires grad.
inline int classify(PyObject* obj, bool* grad) {
  PyTypeObject* type = Py_TYPE(obj);
  if (type != reinterpret_cast<PyTypeObject*>(THPVariableClass) && type != parameter_type) {
    return 0;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  DispatchKeySet ks = t.key_set();
  int device;
  if (ks == kCpu || ks == kCpuInference) {
    device = kCodeCpu;
  } else if (ks == kCuda || ks == kCudaInference) {
    device = kCodeCuda;
  } else {
    return 0;
  }
  if (t.requires_grad()) {
    *grad = true;
  }
  return device;
}

// Device of a Tensor list (0: not plain, -1: no Tensor in it).
inline int classify_list(PyObject* obj, bool optional, bool* grad) {
  if (!PyList_CheckExact(obj) && !PyTuple_CheckExact(obj)) {
    return 0;
  }
  PyObject** items = PySequence_Fast_ITEMS(obj);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  int device = -1;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (items[i] == Py_None && optional) {
      continue;
    }
    int d = classify(items[i], grad);
    if (d == 0 || (device != -1 && d != device)) {
      return 0;
    }
    device = d;
  }
  return device;
}

int classify_call(const char* spec, PyObject* const* values, Py_ssize_t n);

PyObject* guard(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || !PyBytes_CheckExact(args[0])) {
    PyErr_SetString(PyExc_TypeError, "guard(spec: bytes, *values)");
    return nullptr;
  }
  const char* spec = PyBytes_AS_STRING(args[0]);
  Py_ssize_t n_spec = PyBytes_GET_SIZE(args[0]);
  if (n_spec != nargs - 1) {
    PyErr_SetString(PyExc_TypeError, "guard: spec length must match the number of values");
    return nullptr;
  }
  return PyLong_FromLong(classify_call(spec, args + 1, nargs - 1));
}

// The guard's decision for values[0..n) described by spec[0..n): 0, or DEVICE | GRAD.
int classify_call(const char* spec, PyObject* const* values, Py_ssize_t n) {
  auto local = c10::impl::tls_local_dispatch_key_set();
  if (!(local.included_ - kAllowedIncluded).empty() || !excluded_ok(local.excluded_) ||
      at::impl::torch_function_mode_enabled() ||
      // What the dispatcher asks before recording an op (a thread-local snapshot; hasCallbacks()
      // copies the global callback list under a mutex).
      at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION).has_value() || forward_ad_active()) {
    return 0;
  }
  int device = -1;
  bool grad = false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* obj = values[i];
    int d;
    switch (spec[i]) {
      case 'T':
        d = classify(obj, &grad);
        break;
      case 'O':
        d = obj == Py_None ? -1 : classify(obj, &grad);
        break;
      case 'L':
        d = classify_list(obj, false, &grad);
        break;
      case 'M':
        d = classify_list(obj, true, &grad);
        break;
      case 'X':
        d = -1;
        break;
      // Exact Python types, as the generated code's value guards check them.
      case 'f':
        d = PyFloat_CheckExact(obj) ? -1 : 0;
        break;
      case 'b':
        d = PyBool_Check(obj) ? -1 : 0;
        break;
      case 'i': {
        int overflow = 0;
        d = PyLong_CheckExact(obj) && (PyLong_AsLongLongAndOverflow(obj, &overflow), overflow == 0) ? -1 : 0;
        break;
      }
      default:
        d = 0;
    }
    if (d == 0 || (d != -1 && device != -1 && d != device)) {
      return 0;
    }
    if (d != -1) {
      device = d;
    }
  }
  if (device == -1) {
    return 0;
  }
  // Exclusion works on functionality bits (inference_mode, AutoDispatchBelowAutograd).
  if (grad && c10::GradMode::is_enabled() && !local.excluded_.has(DispatchKey::AutogradFunctionality)) {
    return device | kCodeGrad;
  }
  return device;
}

// A plain Tensor with at most `refs` references, no view, and a storage of its own (set_() can
// share one without a view relation).
inline bool is_fresh(PyObject* obj, Py_ssize_t refs) {
  if (Py_TYPE(obj) != reinterpret_cast<PyTypeObject*>(THPVariableClass) || Py_REFCNT(obj) > refs) {
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  return !t.is_view() && t.has_storage() && t.storage().use_count() == 1;
}

PyObject* fresh(PyObject* /*self*/, PyObject* obj) {
  // Two references: the caller's local variable and the argument of this call.
  return PyBool_FromLong(is_fresh(obj, 2));
}

// call_below_autograd(fn, *args, **kwargs): fn(*args, **kwargs) with autograd keys excluded.
PyObject* call_below_autograd(PyObject* /*self*/, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "call_below_autograd(fn, *args)");
    return nullptr;
  }
  at::AutoDispatchBelowAutograd guard;
  return PyObject_Vectorcall(args[0], args + 1, nargs - 1, kwnames);
}

PyObject* set_forward_ad(PyObject* /*self*/, PyObject* arg) {
  Py_INCREF(arg);
  Py_XSETREF(forward_ad, arg);
  Py_RETURN_NONE;
}

PyObject* set_fallback(PyObject* /*self*/, PyObject* arg) {
  Py_INCREF(arg);
  Py_XSETREF(fallback, arg);
  Py_RETURN_NONE;
}

// The pending exception is a TypeError raised while binding arguments (no frame of the call
// ran): clear it and return true, for the fallback to raise the dispatcher's error instead.
bool binding_error() {
  if (!PyErr_ExceptionMatches(PyExc_TypeError)) {
    return false;
  }
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (traceback != nullptr) {  // raised inside the call
    PyErr_Restore(type, value, traceback);
    return false;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  return true;
}

PyObject* meta_call(PyObject* cls, PyObject* args, PyObject* kwargs) {
  PyObject* call = PyObject_GetAttr(cls, call_name);
  if (call == nullptr) {
    return nullptr;
  }
  if (call != Py_None && fallback != nullptr) {
    PyObject* result = PyObject_Call(call, args, kwargs);
    Py_DECREF(call);
    if (result != nullptr || !binding_error()) {
      return result;
    }
  } else {
    Py_DECREF(call);
  }
  if (fallback == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "opclass: no fallback call registered");
    return nullptr;
  }
  // fallback(cls, *args, **kwargs)
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  PyObject* full = PyTuple_New(n + 1);
  if (full == nullptr) {
    return nullptr;
  }
  Py_INCREF(cls);
  PyTuple_SET_ITEM(full, 0, cls);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyTuple_GET_ITEM(args, i);
    Py_INCREF(item);
    PyTuple_SET_ITEM(full, i + 1, item);
  }
  PyObject* result = PyObject_Call(fallback, full, kwargs);
  Py_DECREF(full);
  return result;
}

PyObject* fast_name = nullptr;  // "_opclass_fast"

// A tuning table's test, (places, {dtype: (low, high)}) (install/tuning.py, native_test): the
// call's bucket, the dtype of the first floating Tensor at places (else of the first) and the
// largest numel, is in the table where that numel is in [low, high) for that dtype (the spec made
// each place a Tensor). 1, 0, or -1 with an error set.
int in_bucket(PyObject* test, PyObject* const* args) {
  PyObject* places = PyTuple_GET_ITEM(test, 0);
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool floating = false;
  long long numel = 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(places); ++i) {
    const at::Tensor& t = THPVariable_Unpack(args[PyLong_AsSsize_t(PyTuple_GET_ITEM(places, i))]);
    if (!floating && (i == 0 || at::isFloatingType(t.scalar_type()))) {
      dtype = t.scalar_type();
      floating = at::isFloatingType(dtype);
    }
    numel = std::max(numel, static_cast<long long>(t.numel()));
  }
  PyObject* span = PyDict_GetItemWithError(PyTuple_GET_ITEM(test, 1), reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
  if (span == nullptr) {
    return PyErr_Occurred() ? -1 : 0;
  }
  return PyLong_AsLongLong(PyTuple_GET_ITEM(span, 0)) <= numel && numel < PyLong_AsLongLong(PyTuple_GET_ITEM(span, 1)) ? 1 : 0;
}

// The whole plain-eager call in C, for simple ops (see callpath/source.py, c_entry): fast is
// (spec, single, kernel_cpu, kernel_cuda, apply_cpu, apply_cuda, finish, blocks, key[, keywords,
// route, written, returned]); `block`: an open use_providers block's kernels for the op,
// (kernel_cpu, kernel_cuda, ...), or nullptr. args[0..nargs) are the values, the last
// len(kwnames) of them passed by keyword. Returns NotImplemented (a new reference) when the
// generated call function must decide.
PyObject* fast_call(PyObject* fast, const char* spec, PyObject* const* args, Py_ssize_t nargs, PyObject* block, PyObject* kwnames) {
  int code = classify_call(spec, args, nargs);
  Py_ssize_t npos = nargs - (kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject* target = Py_None;
  if (code == kCodeCpu || code == kCodeCuda) {
    target = block != nullptr ? PyTuple_GET_ITEM(block, code - 1) : PyTuple_GET_ITEM(fast, code + 1);
  } else if (block == nullptr && (code == (kCodeCpu | kCodeGrad) || code == (kCodeCuda | kCodeGrad))) {
    target = PyTuple_GET_ITEM(fast, code - 1);
  }
  // A choice among providers: (predicate, kernel, ..., last): the first kernel whose predicate
  // accepts the arguments, else last (the one without a predicate, or the refusal). A predicate
  // that is a tuple is a tuning table's bucket test, made here (no Python call).
  if (PyTuple_CheckExact(target)) {
    Py_ssize_t n = PyTuple_GET_SIZE(target);
    PyObject* picked = PyTuple_GET_ITEM(target, n - 1);
    for (Py_ssize_t i = 0; i + 1 < n; i += 2) {
      PyObject* test = PyTuple_GET_ITEM(target, i);
      if (PyTuple_CheckExact(test)) {
        int in = in_bucket(test, args);
        if (in < 0) {
          return nullptr;
        }
        if (in == 1) {
          picked = PyTuple_GET_ITEM(target, i + 1);
          break;
        }
        continue;
      }
      PyObject* ok = PyObject_Vectorcall(test, args, static_cast<size_t>(npos), kwnames);
      Py_XDECREF(ok);  // True and False outlive it; anything else: the generated call raises
      if (ok == nullptr || (ok != Py_True && ok != Py_False)) {
        return ok == nullptr ? nullptr : Py_NewRef(Py_NotImplemented);
      }
      if (ok == Py_True) {
        picked = PyTuple_GET_ITEM(target, i + 1);
        break;
      }
    }
    target = picked;
  }
  if (target == Py_None) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  // The arguments the op writes: their version counters, as its ADInplaceOrView kernel would.
  PyObject* written = PyTuple_GET_SIZE(fast) > 11 ? PyTuple_GET_ITEM(fast, 11) : Py_None;
  if (written != Py_None && !c10::impl::tls_is_dispatch_key_excluded(DispatchKey::ADInplaceOrView)) {
    try {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(written); ++i) {
        torch::autograd::impl::bump_version(THPVariable_Unpack(args[PyLong_AsSsize_t(PyTuple_GET_ITEM(written, i))]));
      }
    } catch (const std::exception&) {
      Py_RETURN_NOTIMPLEMENTED;  // an inference tensor: the generated call raises torch's error
    }
  }
  PyObject* out = PyObject_Vectorcall(target, args, static_cast<size_t>(npos), kwnames);
  // A fresh Tensor is final only when the plan says the op returns exactly one Tensor; the
  // Function's forward (code has kCodeGrad) checked and converted its outputs itself; an op that
  // returns the argument it writes is done when the kernel returned that argument.
  if (out == nullptr || (code & kCodeGrad) || (PyTuple_GET_ITEM(fast, 1) == Py_True && is_fresh(out, 1))) {
    return out;
  }
  // An overload that returns the one argument it writes: done, whatever the kernel returned
  // (an out-style or in-place kernel's return is ignored, as the generated call ignores it).
  if (PyTuple_GET_SIZE(fast) > 12) {
    Py_ssize_t returned = PyLong_AsSsize_t(PyTuple_GET_ITEM(fast, 12));
    if (returned >= 0 && returned < nargs) {
      Py_DECREF(out);
      return Py_NewRef(args[returned]);
    }
  }
  // finish(kernel, out, *args): the full aliasing check and the conversion the dispatcher would do.
  std::vector<PyObject*> full(static_cast<size_t>(nargs) + 2);
  full[0] = target;
  full[1] = out;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    full[static_cast<size_t>(i) + 2] = args[i];
  }
  PyObject* result = PyObject_Vectorcall(PyTuple_GET_ITEM(fast, 6), full.data(), static_cast<size_t>(npos) + 2, kwnames);
  Py_DECREF(out);
  return result;
}

// kwnames names exactly `names` (a tuple of str), in that order.
bool same_names(PyObject* names, PyObject* kwnames) {
  if (!PyTuple_CheckExact(names) || PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(kwnames)) {
    return false;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); ++i) {
    PyObject* a = PyTuple_GET_ITEM(names, i);
    PyObject* b = PyTuple_GET_ITEM(kwnames, i);
    if (a != b && (!PyUnicode_Check(b) || PyUnicode_Compare(a, b) != 0)) {
      return false;
    }
  }
  return true;
}

// The C entry's call, or NotImplemented: an open use_providers block (context variable blocks)
// has the op's kernels cached under key, or the generated function decides (and caches them).
PyObject* entry_call(PyObject* fast, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* blocks = PyTuple_GET_ITEM(fast, 7);
  PyObject* block = nullptr;
  if (blocks != Py_None && PyContextVar_Get(blocks, nullptr, &block) < 0) {
    return nullptr;
  }
  PyObject* kernels = nullptr;  // borrowed from block, which is held
  if (block != nullptr && block != Py_None) {
    kernels = PyDict_GetItemWithError(block, PyTuple_GET_ITEM(fast, 8));
    if (kernels == nullptr) {
      Py_DECREF(block);
      if (PyErr_Occurred()) {
        return nullptr;
      }
      Py_RETURN_NOTIMPLEMENTED;
    }
    kernels = kernels == Py_None ? nullptr : kernels;
  }
  PyObject* result = fast_call(fast, PyBytes_AS_STRING(PyTuple_GET_ITEM(fast, 0)), args, nargs, kernels, kwnames);
  Py_XDECREF(block);
  return result;
}

// The op class's vectorcall: cls._opclass_call(*args) with no argument tuple built and no
// attribute-lookup machinery (the type cache answers), which tp_call would cost on every call.
PyObject* op_vectorcall(PyObject* cls, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  // The C entry first: a class has one only while its generated call function is current.
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject* fast = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), fast_name);  // borrowed
  Py_ssize_t size = fast != nullptr && PyTuple_CheckExact(fast) ? PyTuple_GET_SIZE(fast) : 0;
  // keywords: the out buffers' names, which the .out overload's entry takes by keyword only (in
  // that order), and the functional op's call routes to the class of `route` (a None among them
  // is "not passed": the generated call decides).
  PyObject* keywords = size > 9 ? PyTuple_GET_ITEM(fast, 9) : Py_None;
  PyObject* route = size > 10 ? PyTuple_GET_ITEM(fast, 10) : Py_None;
  bool buffers = nkw > 0 && keywords != Py_None && same_names(keywords, kwnames) &&
                 std::none_of(args + nargs, args + nargs + nkw, [](PyObject* v) { return v == Py_None; });
  bool takes_keywords = keywords != Py_None && route == Py_None;
  if (size >= 9 && (takes_keywords ? buffers : nkw == 0 || (buffers && route != Py_None))) {
    // Held: the kernel may run another thread that redefines the op and drops the class's entry.
    Py_INCREF(fast);
    PyObject* result = nullptr;
    if (nkw > 0 && route != Py_None) {
      // MyOp(x, out=buf): the .out overload's class, whose entry takes these keywords.
      result = op_vectorcall(route, args, nargsf, kwnames);
      Py_DECREF(fast);
      return result;
    }
    if (PyBytes_GET_SIZE(PyTuple_GET_ITEM(fast, 0)) == nargs + nkw) {
      result = entry_call(fast, args, nargs + nkw, kwnames);
      Py_DECREF(fast);
      if (result != Py_NotImplemented) {
        return result;
      }
      Py_DECREF(result);
    } else {
      Py_DECREF(fast);
    }
  }
  PyObject* call = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(cls), call_name);  // borrowed
  if (call != nullptr && call != Py_None && fallback != nullptr) {
    Py_INCREF(call);  // the class's attribute may be replaced while the call runs
    PyObject* result = PyObject_Vectorcall(call, args, nargsf, kwnames);
    Py_DECREF(call);
    if (result != nullptr || !binding_error()) {
      return result;
    }
  } else if (fallback == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "opclass: no fallback call registered");
    return nullptr;
  }
  // fallback(cls, *args, **kwargs): the dispatcher's argument parsing and error (or "not an op").
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  Py_ssize_t total = n + (kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0);
  std::vector<PyObject*> full(static_cast<size_t>(total) + 1);
  full[0] = cls;
  for (Py_ssize_t i = 0; i < total; ++i) {
    full[static_cast<size_t>(i) + 1] = args[i];
  }
  return PyObject_Vectorcall(fallback, full.data(), static_cast<size_t>(n + 1), kwnames);
}

// enable_vectorcall(meta, cls=None): let classes of metaclass `meta` be called through their
// tp_vectorcall (heap metaclasses that define tp_call do not inherit that flag), and give `cls`
// ours. A class without one (an abstract base) still goes through tp_call.
PyObject* enable_vectorcall(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || !PyType_Check(args[0]) || (nargs > 1 && args[1] != Py_None && !PyType_Check(args[1]))) {
    PyErr_SetString(PyExc_TypeError, "enable_vectorcall(meta: type, cls: type | None = None)");
    return nullptr;
  }
  auto* meta = reinterpret_cast<PyTypeObject*>(args[0]);
  if (!PyType_IsSubtype(meta, &PyType_Type) || meta->tp_call != meta_call) {
    PyErr_SetString(PyExc_TypeError, "enable_vectorcall: not a metaclass built on MetaBase");
    return nullptr;
  }
  meta->tp_vectorcall_offset = offsetof(PyTypeObject, tp_vectorcall);
  meta->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
  if (nargs > 1 && args[1] != Py_None) {
    auto* cls = reinterpret_cast<PyTypeObject*>(args[1]);
    if (!PyType_IsSubtype(Py_TYPE(cls), meta)) {
      PyErr_SetString(PyExc_TypeError, "enable_vectorcall: the class is not an instance of the metaclass");
      return nullptr;
    }
    cls->tp_vectorcall = op_vectorcall;
  }
  Py_RETURN_NONE;
}

PyObject* set_parameter_type(PyObject* /*self*/, PyObject* arg) {
  if (!PyType_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "expected a type");
    return nullptr;
  }
  Py_INCREF(arg);
  parameter_type = reinterpret_cast<PyTypeObject*>(arg);
  Py_RETURN_NONE;
}

// The facts the Python side must share, for a test to compare (opclass/core/types.py):
// {"cpu": (plain, inference) raw key sets, "cuda": (...), "codes": (cpu, cuda, grad), "included": raw}.
PyObject* facts(PyObject* /*self*/, PyObject* /*unused*/) {
  return Py_BuildValue("{s:(KK),s:(KK),s:(iii),s:K}", "cpu", static_cast<unsigned long long>(kCpu.raw_repr()),
                       static_cast<unsigned long long>(kCpuInference.raw_repr()), "cuda",
                       static_cast<unsigned long long>(kCuda.raw_repr()), static_cast<unsigned long long>(kCudaInference.raw_repr()),
                       "codes", kCodeCpu, kCodeCuda, kCodeGrad, "included",
                       static_cast<unsigned long long>(kAllowedIncluded.raw_repr()));
}

PyMethodDef methods[] = {
    {"facts", facts, METH_NOARGS, "the key sets and codes the guard uses"},
    {"guard", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(guard)), METH_FASTCALL, "plain-eager guard"},
    {"set_parameter_type", set_parameter_type, METH_O, "register nn.Parameter"},
    {"set_fallback", set_fallback, METH_O, "register OpMeta's Python __call__"},
    {"enable_vectorcall", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(enable_vectorcall)), METH_FASTCALL,
     "call op classes through vectorcall"},
    {"set_forward_ad", set_forward_ad, METH_O, "register torch.autograd.forward_ad"},
    {"fresh", fresh, METH_O, "output cannot alias an input"},
    {"call_below_autograd", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call_below_autograd)),
     METH_FASTCALL | METH_KEYWORDS, "call with autograd keys excluded"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "opclass_guard", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_opclass_guard(void) {
  call_name = PyUnicode_InternFromString("_opclass_call");
  fast_name = PyUnicode_InternFromString("_opclass_fast");
  level_name = PyUnicode_InternFromString("_current_level");
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) {
    return nullptr;
  }
  // MetaBase(type) with a C tp_call; created at run time so it subclasses the real `type`.
  static PyType_Slot slots[] = {{Py_tp_call, reinterpret_cast<void*>(meta_call)}, {0, nullptr}};
  static PyType_Spec spec = {
      "opclass_guard.MetaBase", 0, 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, slots};
  PyObject* bases = PyTuple_Pack(1, reinterpret_cast<PyObject*>(&PyType_Type));
  PyObject* meta = bases ? PyType_FromSpecWithBases(&spec, bases) : nullptr;
  Py_XDECREF(bases);
  if (meta == nullptr || PyModule_AddObject(m, "MetaBase", meta) < 0) {
    Py_XDECREF(meta);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
