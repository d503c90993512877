#include "trainer/model/keras_weights.h"

#include <hdf5.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <utility>

namespace tj::model {
namespace {

// The name HDF5 gives the in-memory file: the core driver keeps no file of that name.
constexpr char kImageName[] = "keras.weights.h5";
// How much the core driver grows its buffer by.
constexpr size_t kCoreIncrement = size_t{1} << 20;

// An HDF5 identifier, closed by `close` when the handle goes.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 prints its error stack to stderr by default; the errors here are returned instead. The
// printer is switched off while the guard lives and put back after.
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Keras' keras.src.utils.naming.to_snake_case: "Conv2D" -> "conv2d", "ReLU" -> "re_lu",
// "BatchNormalization" -> "batch_normalization".
std::string SnakeCase(const std::string& name) {
  static const std::regex kNonWord(R"(\W+)");
  static const std::regex kWordStart("(.)([A-Z][a-z]+)");
  static const std::regex kLowerUpper("([a-z])([A-Z])");
  std::string s = std::regex_replace(name, kNonWord, "");
  s = std::regex_replace(s, kWordStart, "$1_$2");
  s = std::regex_replace(s, kLowerUpper, "$1_$2");
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return s;
}

std::string ShapeString(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) {
    s += (i > 0 ? ", " : "") + std::to_string(dims[i]);
  }
  return s + (dims.size() == 1 ? ",)" : ")");
}

std::vector<hsize_t> Dims(const Tensor& t) { return {t.shape.begin(), t.shape.end()}; }

// A layer's variables in the file's order: its parameters, then its state.
std::vector<std::pair<const Tensor*, int>> LayerVariables(const Layer& layer) {
  std::vector<std::pair<const Tensor*, int>> vars;
  for (const Tensor& t : layer.params) vars.emplace_back(&t, 0);
  for (const Tensor& t : layer.state) vars.emplace_back(&t, 1);
  return vars;
}

Status WriteNameAttribute(hid_t group, const std::string& name) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (!type.ok() || !space.ok() || H5Tset_size(type.get(), H5T_VARIABLE) < 0 ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0) {
    return Status::Error("HDF5 could not make a string type");
  }
  Handle attr(H5Acreate2(group, "name", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
              H5Aclose);
  const char* text = name.c_str();
  if (!attr.ok() || H5Awrite(attr.get(), type.get(), static_cast<const void*>(&text)) < 0) {
    return Status::Error("HDF5 could not write the attribute name = '" + name + "'");
  }
  return Status::Ok();
}

// The group `path` and its `vars` group (attribute name), as Keras' H5IOStore makes them.
StatusOr<hid_t> MakeVarsGroup(hid_t file, const std::string& path, const std::string& name) {
  hid_t parent = file;
  Handle made(
      path.empty() ? -1 : H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Gclose);
  if (!path.empty()) {
    if (!made.ok()) return Status::Error("HDF5 could not create the group " + path);
    parent = made.get();
  }
  hid_t vars = H5Gcreate2(parent, "vars", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (vars < 0) return Status::Error("HDF5 could not create the group " + path + "/vars");
  if (Status s = WriteNameAttribute(vars, name); !s.ok()) {
    H5Gclose(vars);
    return s;
  }
  return vars;
}

Status WriteVariable(hid_t vars, int index, const Tensor& tensor, const float* values) {
  const std::vector<hsize_t> dims = Dims(tensor);
  Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  const std::string key = std::to_string(index);
  Handle set(space.ok() ? H5Dcreate2(vars, key.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT)
                        : -1,
             H5Dclose);
  if (!set.ok() ||
      H5Dwrite(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0) {
    return Status::Error("HDF5 could not write " + tensor.name);
  }
  return Status::Ok();
}

Status WriteFile(hid_t file, const Graph& graph, const std::vector<float>& params,
                 const std::vector<float>& state) {
  {
    auto model_vars = MakeVarsGroup(file, "", graph.name);
    if (!model_vars.ok()) return model_vars.status();
    H5Gclose(*model_vars);
  }
  Handle layers(H5Gcreate2(file, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!layers.ok()) return Status::Error("HDF5 could not create the group layers");
  const std::vector<std::string> paths = KerasWeightPaths(graph);
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    if (paths[i].empty()) continue;
    const Layer& layer = graph.layers[i];
    auto vars = MakeVarsGroup(file, paths[i], layer.name);
    if (!vars.ok()) return vars.status();
    Handle vars_group(*vars, H5Gclose);
    int index = 0;
    for (const auto& [tensor, vector] : LayerVariables(layer)) {
      const float* values = (vector == 0 ? params.data() : state.data()) + tensor->offset;
      TJ_RETURN_IF_ERROR(WriteVariable(vars_group.get(), index++, *tensor, values));
    }
  }
  return Status::Ok();
}

// The names of the links in `group`, in HDF5's name order.
std::vector<std::string> LinkNames(hid_t group) {
  std::vector<std::string> names;
  H5G_info_t info{};
  if (H5Gget_info(group, &info) < 0) return names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size =
        H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (size < 0) continue;
    std::string name(static_cast<size_t>(size) + 1, '\0');
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                       H5P_DEFAULT);
    name.resize(static_cast<size_t>(size));
    names.push_back(std::move(name));
  }
  return names;
}

bool HasLink(hid_t group, const std::string& path) {
  return H5Lexists(group, path.c_str(), H5P_DEFAULT) > 0;
}

// The attribute "name" of a vars group, or "?" when it has none or another type.
std::string NameAttribute(hid_t vars) {
  if (H5Aexists(vars, "name") <= 0) return "?";
  Handle attr(H5Aopen(vars, "name", H5P_DEFAULT), H5Aclose);
  Handle type(attr.ok() ? H5Aget_type(attr.get()) : -1, H5Tclose);
  if (!type.ok() || H5Tget_class(type.get()) != H5T_STRING) return "?";
  if (H5Tis_variable_str(type.get()) > 0) {
    char* text = nullptr;
    if (H5Aread(attr.get(), type.get(), static_cast<void*>(&text)) < 0 || text == nullptr) {
      return "?";
    }
    std::string out(text);
    H5free_memory(text);
    return out;
  }
  std::string out(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), out.data()) < 0) return "?";
  return out.substr(0, out.find('\0'));
}

// "layers/dense_1 (layer Dense 'dense2')".
std::string Where(const std::string& path, const Layer& layer) {
  return path + " (layer " + layer.keras_class + " '" + layer.name + "')";
}

constexpr char kWhatToDo[] =
    "give the weights of the model --model-config declares (Keras' model.save_weights of that "
    "model), or declare the model the weights were saved from";

Status ReadVariable(hid_t vars, const std::string& where, int index, const Tensor& tensor,
                    float* out) {
  const std::string key = std::to_string(index);
  const std::string variable =
      "variable " + key + " (" + tensor.name + ", shape " + ShapeString(Dims(tensor)) + ")";
  if (!HasLink(vars, key)) {
    return Status::Error(where + ": the file lacks " + variable + "; " + kWhatToDo);
  }
  Handle set(H5Dopen2(vars, key.c_str(), H5P_DEFAULT), H5Dclose);
  Handle type(set.ok() ? H5Dget_type(set.get()) : -1, H5Tclose);
  Handle space(set.ok() ? H5Dget_space(set.get()) : -1, H5Sclose);
  if (!set.ok() || !type.ok() || !space.ok()) {
    return Status::Error(where + ": " + variable + " is not a dataset in the file; " + kWhatToDo);
  }
  if (H5Tget_class(type.get()) != H5T_FLOAT) {
    return Status::Error(where + ": " + variable +
                         " is not floating point in the file (float16, float32 or float64 are "
                         "read; save the weights of a float32 model)");
  }
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    return Status::Error(where + ": " + variable + " has no readable shape in the file");
  }
  if (dims != Dims(tensor)) {
    return Status::Error(where + ": " + variable + " has shape " + ShapeString(dims) +
                         " in the file and " + ShapeString(Dims(tensor)) + " in the model; " +
                         kWhatToDo);
  }
  if (H5Dread(set.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
    return Status::Error(where + ": HDF5 could not read " + variable);
  }
  return Status::Ok();
}

Status ReadFile(hid_t file, const Graph& graph, KerasWeights* out) {
  if (!HasLink(file, "layers")) {
    return Status::Error(
        "the file has no group 'layers': not Keras 3's .weights.h5 (model.save_weights("
        "\"x.weights.h5\") writes one; the legacy .h5 of Keras 2 is not read)");
  }
  Handle layers(H5Gopen2(file, "layers", H5P_DEFAULT), H5Gclose);
  if (!layers.ok()) return Status::Error("the file's 'layers' is not a group");
  const std::vector<std::string> paths = KerasWeightPaths(graph);
  std::set<std::string> expected;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    if (paths[i].empty()) continue;
    expected.insert(paths[i].substr(paths[i].find('/') + 1));
    const Layer& layer = graph.layers[i];
    const auto variables = LayerVariables(layer);
    const std::string where = Where(paths[i], layer);
    const std::string vars_path = paths[i] + "/vars";
    const bool present = HasLink(file, paths[i]) && HasLink(file, vars_path);
    if (!present) {
      if (variables.empty()) continue;  // a layer without weights: nothing to read
      return Status::Error(where + ": the file has no group " + vars_path + " with its " +
                           std::to_string(variables.size()) + " variables; " + kWhatToDo);
    }
    Handle vars(H5Gopen2(file, vars_path.c_str(), H5P_DEFAULT), H5Gclose);
    if (!vars.ok()) return Status::Error(where + ": " + vars_path + " is not a group");
    int index = 0;
    for (const auto& [tensor, vector] : variables) {
      float* target = (vector == 0 ? out->params.data() : out->state.data()) + tensor->offset;
      TJ_RETURN_IF_ERROR(ReadVariable(vars.get(), where, index++, *tensor, target));
    }
    const size_t in_file = LinkNames(vars.get()).size();
    if (in_file > variables.size()) {
      return Status::Error(where + ": the file has " + std::to_string(in_file) +
                           " variables for the layer (layer '" + NameAttribute(vars.get()) +
                           "' there) and the model " + std::to_string(variables.size()) + "; " +
                           kWhatToDo);
    }
  }
  for (const std::string& name : LinkNames(layers.get())) {
    if (expected.count(name) > 0) continue;
    const std::string vars_path = "layers/" + name + "/vars";
    if (!HasLink(file, vars_path)) continue;
    Handle vars(H5Gopen2(file, vars_path.c_str(), H5P_DEFAULT), H5Gclose);
    if (!vars.ok() || LinkNames(vars.get()).empty()) continue;  // a layer without weights
    return Status::Error("layers/" + name + " (layer '" + NameAttribute(vars.get()) +
                         "' in the file): the file has weights of a layer the model does not "
                         "have; " +
                         kWhatToDo);
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> KerasWeightPaths(const Graph& graph) {
  std::vector<std::string> paths(graph.layers.size());
  std::map<std::string, int> used;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    if (graph.layers[i].type == LayerType::kInput) continue;
    const std::string base = SnakeCase(graph.layers[i].keras_class);
    auto [it, first] = used.emplace(base, 0);
    if (!first) ++it->second;
    paths[i] = "layers/" + (first ? base : base + "_" + std::to_string(it->second));
  }
  return paths;
}

StatusOr<std::string> EncodeKerasWeights(const Graph& graph, const std::vector<float>& params,
                                         const std::vector<float>& state) {
  if (params.size() != graph.parameter_count || state.size() != graph.state_count) {
    return Status::Error("the weights have " + std::to_string(params.size()) + " parameters and " +
                         std::to_string(state.size()) + " floats of state; the model '" +
                         graph.name + "' has " + std::to_string(graph.parameter_count) + " and " +
                         std::to_string(graph.state_count));
  }
  QuietErrors quiet;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), kCoreIncrement, 0) < 0) {
    return Status::Error("HDF5 could not set up an in-memory file");
  }
  Handle file(H5Fcreate(kImageName, H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!file.ok()) return Status::Error("HDF5 could not create an in-memory file");
  TJ_RETURN_IF_ERROR(WriteFile(file.get(), graph, params, state));
  if (H5Fflush(file.get(), H5F_SCOPE_GLOBAL) < 0) {
    return Status::Error("HDF5 could not flush the in-memory file");
  }
  const ssize_t size = H5Fget_file_image(file.get(), nullptr, 0);
  if (size <= 0) return Status::Error("HDF5 could not size the file's image");
  std::string bytes(static_cast<size_t>(size), '\0');
  if (H5Fget_file_image(file.get(), bytes.data(), bytes.size()) != size) {
    return Status::Error("HDF5 could not copy the file's image");
  }
  return bytes;
}

StatusOr<KerasWeights> DecodeKerasWeights(const Graph& graph, const std::string& bytes) {
  const Status not_hdf5 = Status::Error(
      "not an HDF5 file (give a Keras 3 .weights.h5 file: model.save_weights(\"x.weights.h5\"))");
  if (bytes.empty()) return not_hdf5;
  QuietErrors quiet;
  std::string image = bytes;  // HDF5 takes a mutable buffer (which it copies)
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), kCoreIncrement, 0) < 0 ||
      H5Pset_file_image(fapl.get(), image.data(), image.size()) < 0) {
    return Status::Error("HDF5 could not set up an in-memory file");
  }
  Handle file(H5Fopen(kImageName, H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!file.ok()) return not_hdf5;
  KerasWeights out;
  out.params.assign(graph.parameter_count, 0.0f);
  out.state.assign(graph.state_count, 0.0f);
  TJ_RETURN_IF_ERROR(ReadFile(file.get(), graph, &out));
  return out;
}

}  // namespace tj::model
